# Two entry points that each set up a fresh machine: `make demo` and `make test`.
# torch is the CPU build 2.13.0 (pinned in pyproject's `train` extra).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
VERL_VENV := .venv-verl
VERL := $(VERL_VENV)/.installed-stamp
NEMO_VENV := .venv-nemo
NEMO := $(NEMO_VENV)/.installed-stamp
OPENENV_VENV := .venv-openenv
OPENENV := $(OPENENV_VENV)/.installed-stamp
DEMO := build/demo

.PHONY: install demo test test-fast soak lint clean browser sandbox

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[train,env,dev,lora,trackers,peers]'
	touch $(STAMP)

install: $(STAMP) $(VERL) $(NEMO) $(OPENENV)

# verl's own code, which tests/train/test_peers.py runs on the tensors rlvr's objective gets: verl
# needs ray and a transformers older than rlvr's, so it has an environment of its own.
$(VERL):
	$(PYTHON) -m venv $(VERL_VENV)
	$(VERL_VENV)/bin/python -m pip install --quiet --disable-pip-version-check torch==2.13.0 numpy packaging
	$(VERL_VENV)/bin/python -m pip install --quiet --disable-pip-version-check --no-deps verl==0.9.1 tensordict==0.10.0
	$(VERL_VENV)/bin/python -m pip install --quiet --disable-pip-version-check ray==2.60.0 omegaconf==2.3.1 \
		hydra-core==1.3.8 codetiming==1.4.0 cloudpickle orjson aiohttp 'pyvers>=0.1' importlib_metadata transformers==5.10.0
	touch $(VERL)

# NeMo Gym's own resources servers (nemo-gym 0.4.0 from PyPI), which tests/env/test_nemo_gym.py
# serves and rlvr trains against through `nemo-gym+URL`: the package declares Python >= 3.12 but
# serves on 3.11; what serving imports is installed, not its training extras (mlflow, datasets).
$(NEMO):
	$(PYTHON) -m venv $(NEMO_VENV)
	$(NEMO_VENV)/bin/python -m pip install --quiet --disable-pip-version-check --no-deps --ignore-requires-python \
		nemo-gym==0.4.0
	$(NEMO_VENV)/bin/python -m pip install --quiet --disable-pip-version-check ray==2.60.0 omegaconf==2.3.1 \
		hydra-core==1.3.8 orjson requests 'aiohttp>=3.14.1' fastapi uvicorn itsdangerous 'openai<=2.7.2' pydantic \
		'mcp>=1.27,<2' rich devtools psutil tqdm 'anthropic<=0.109.2' uvloop yappi wandb pydot gprof2dot GitPython pandas
	touch $(NEMO)

# OpenEnv (openenv-core 0.3.0 from PyPI), which serves tests/env/openenv/guess.py for
# tests/env/test_openenv.py (`openenv+URL`); its mcp pin differs from verifiers', hence its own environment.
$(OPENENV):
	$(PYTHON) -m venv $(OPENENV_VENV)
	$(OPENENV_VENV)/bin/python -m pip install --quiet --disable-pip-version-check openenv-core==0.3.0
	touch $(OPENENV)

demo: $(STAMP) sandbox
	rm -rf $(DEMO)
	$(BIN)/rlvr init $(DEMO)/my-exp --template single-turn
	$(BIN)/rlvr validate --deep $(DEMO)/my-exp/experiment.rlvr.yaml
	$(BIN)/rlvr lock $(DEMO)/my-exp/experiment.rlvr.yaml
	test -f contracts/arith/model/config.json || \
	  $(BIN)/python -m rlvr_cli.toy.tiny contracts/arith/model --alphabet arithmetic
	test -f contracts/echo/model/config.json || \
	  $(BIN)/python -m rlvr_cli.toy.tiny contracts/echo/model --alphabet arithmetic
	test -f contracts/spell/model/config.json || \
	  $(BIN)/python -m rlvr_cli.toy.tiny contracts/spell/model --alphabet digits
	test -f contracts/lookup/model/config.json || \
	  $(BIN)/python -m rlvr_cli.toy.tiny contracts/lookup/model --warm-up contracts/lookup/warmup.jsonl
	test -f contracts/echo/warm/config.json || \
	  $(BIN)/python -m rlvr_cli.toy.tiny contracts/echo/warm --warm-up contracts/echo/warmup.jsonl --warm-up-steps 300
	$(BIN)/rlvr validate --deep --strict contracts/
	$(BIN)/rlvr data check contracts/hints-cpu.rlvr.yaml
	$(BIN)/rlvr render contracts/grpo-cpu.rlvr.yaml --conversations contracts/arith/conversations.jsonl
	$(BIN)/rlvr init $(DEMO)/agent --template tool-use --no-model
	$(BIN)/rlvr audit verifier $(DEMO)/agent/experiment.rlvr.yaml
	$(BIN)/rlvr audit isolation $(DEMO)/agent/experiment.rlvr.yaml --sessions 32
	# agentic RL that learns: look a digit up with a tool, then answer with it (correct rises)
	$(BIN)/rlvr audit verifier contracts/lookup-cpu.rlvr.yaml --candidates contracts/lookup/audit/candidates.yaml
	$(BIN)/rlvr train contracts/lookup-cpu.rlvr.yaml --run-dir $(DEMO)/lookup-cpu
	$(BIN)/rlvr audit rollouts $(DEMO)/lookup-cpu
	# how far lookup gets depends on the machine's float kernels (docs/environments.md): where its
	# holdout-correct gate fails (exit 1) the demo goes on to the report, which shows why
	code=0; $(BIN)/rlvr gate contracts/lookup-cpu.rlvr.yaml --candidate $(DEMO)/lookup-cpu || code=$$?; \
	  test $$code -le 1 && echo "demo: lookup release gate exit $$code; see $(DEMO)/lookup-cpu/gate/verdict.json"
	$(BIN)/rlvr report $(DEMO)/lookup-cpu
	$(BIN)/rlvr audit verifier contracts/grpo-cpu.rlvr.yaml
	# code answers: the exploit arms against the real bubblewrap sandbox
	$(BIN)/rlvr init $(DEMO)/code --template code
	$(BIN)/rlvr validate --deep $(DEMO)/code/experiment.rlvr.yaml
	$(BIN)/rlvr audit verifier $(DEMO)/code/experiment.rlvr.yaml
	$(BIN)/rlvr train contracts/grpo-cpu.rlvr.yaml --run-dir $(DEMO)/grpo-cpu
	$(BIN)/rlvr status $(DEMO)/grpo-cpu
	$(BIN)/rlvr audit rollouts $(DEMO)/grpo-cpu
	# the toy policy learns the answer format but few sums, so its correctness gate fails (exit 1);
	# the demo goes on to the report, which shows why
	code=0; $(BIN)/rlvr gate contracts/grpo-cpu.rlvr.yaml --candidate $(DEMO)/grpo-cpu || code=$$?; \
	  test $$code -le 1 && echo "demo: release gate exit $$code; see $(DEMO)/grpo-cpu/gate/verdict.json"
	$(BIN)/rlvr report $(DEMO)/grpo-cpu
	# a task the tiny model does learn, with answers that end with the stop token: on most CPUs
	# measured the holdout's answers go right and ended 0 → 0.5–1.0 and the release passes; where
	# the float kernels send the run elsewhere (README.md, the tour) the gate's exit 1 is shown
	$(BIN)/rlvr train contracts/echo-stop-cpu.rlvr.yaml --run-dir $(DEMO)/echo-stop-cpu
	code=0; $(BIN)/rlvr gate contracts/echo-stop-cpu.rlvr.yaml --candidate $(DEMO)/echo-stop-cpu || code=$$?; \
	  test $$code -le 1 && echo "demo: echo-stop release gate exit $$code; see $(DEMO)/echo-stop-cpu/gate/verdict.json"
	$(BIN)/rlvr report $(DEMO)/echo-stop-cpu
	# a passing run as a release bundle (docs/release.md), kept in a registry
	grep -q '"release": "pass"' $(DEMO)/echo-stop-cpu/gate/verdict.json || { echo "demo: no release bundle: the gates failed"; exit 0; }; \
	  $(BIN)/rlvr release build contracts/echo-stop-cpu.rlvr.yaml $(DEMO)/echo-stop-cpu --registry $(DEMO)/releases && \
	  $(BIN)/rlvr release list $(DEMO)/releases
	# the same task with a LoRA adapter (peft) over a warmed-up base; the reference is the base with
	# the adapter switched off, the checkpoints and final/ hold the adapter alone
	$(BIN)/rlvr train contracts/echo-stop-lora-cpu.rlvr.yaml --run-dir $(DEMO)/echo-stop-lora-cpu
	# whether its release passes depends on the CPU's float kernels (README.md, the LoRA paragraph):
	# a failing gate (exit 1) is shown, not an error of the demo
	code=0; $(BIN)/rlvr gate contracts/echo-stop-lora-cpu.rlvr.yaml --candidate $(DEMO)/echo-stop-lora-cpu || code=$$?; \
	  test $$code -le 1 && echo "demo: LoRA release gate exit $$code; see $(DEMO)/echo-stop-lora-cpu/gate/verdict.json"

# The report test opens the HTML report in headless Chromium (Debian's package).
browser:
	@command -v chromium >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq chromium >/dev/null; }

# environment.unit_tests runs code only under bubblewrap (Debian's package); rlvr never runs it without.
sandbox:
	@command -v bwrap >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq bubblewrap >/dev/null; }

test: $(STAMP) $(VERL) $(NEMO) $(OPENENV) browser sandbox
	$(BIN)/python -m pytest -n 2 --durations=40

# The inner loop: everything but the end-to-end runs marked slow (CI runs `make test`, the whole suite).
test-fast: $(STAMP) sandbox
	$(BIN)/python -m pytest -n 2 -m "not slow and not soak" -q --durations=10

# The soak (tests/soak/): 200 lookup steps against a misbehaving server, SIGKILLed every ~20 steps
# and relaunched with --auto, must end where a straight run ends. ~7 minutes; not in make test.
soak: $(STAMP)
	$(BIN)/python -m pytest -m soak tests/soak -s -q

lint: $(STAMP)
	$(BIN)/ruff check rlvr_cli tests benchmarks
	$(BIN)/ruff format --check rlvr_cli tests benchmarks

clean:
	rm -rf $(VENV) $(VERL_VENV) build .pytest_cache .hypothesis

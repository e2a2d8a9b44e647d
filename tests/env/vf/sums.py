"""A small taskset written for `verifiers` (v1): sums whose answer must be the response's first
number (`correct`, weight 1) and short (`brief`, weight 0.2); `broken` makes the reward raise."""

from __future__ import annotations

import verifiers.v1 as vf


class SumData(vf.TaskData):
    answer: str


class SumConfig(vf.TasksetConfig):
    count: int = 30
    broken: bool = False


class SumTask(vf.Task[SumData]):
    @vf.reward(weight=1.0)
    async def correct(self, trace: vf.Trace) -> float:
        words = trace.last_reply.split()
        return float(bool(words) and words[0] == self.data.answer)

    @vf.reward(weight=0.2)
    async def brief(self, trace: vf.Trace) -> float:
        if self.data.name == "broken":
            raise RuntimeError("the reward's own bug")
        return float(len(trace.last_reply) <= 4)


class SumTaskset(vf.Taskset[SumTask, SumConfig]):
    def load(self) -> list[SumTask]:
        tasks = []
        for i in range(self.config.count):
            a, b = i % 5, i // 5
            name = "broken" if self.config.broken and i == 0 else None
            data = SumData(id=f"sum-{i}", name=name, prompt=f"{a}+{b}=", answer=str(a + b))
            tasks.append(SumTask(data, self.config.task))
        return tasks

"""`rlvr report`: a run's HTML report from its folder (`run`), its charts (`charts`), what it reads
off the records (`from_records`), and the comparison of runs (`compare`)."""

"""What the plug-in's descriptor shows before anything of the format is imported: the judge's
default settings (spec.py: JudgeSettings) and the p of fast_p (results.py)."""

JUDGE_SEEDS = 3  # correctness trials per input distribution
JUDGE_TRIALS = 20  # timed rounds
JUDGE_BASELINES = ("eager", "compile")  # timed beside each solution
FAST_P = ("0.0", "1.0", "1.5", "2.0")  # as the summary's keys: share correct and > p times faster

"""bench/benchlib.py — what the peer benchmarks (cpu_vs_llamacpp.py,
served_vs_llamaserver.py) share: the machine and commit they record, and the
paired ratio they report (the median of per-repetition ratios, so a load
change during a run hits both sides of a ratio alike)."""

import platform
import statistics
import subprocess


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def git_commit(repo):
    try:
        return subprocess.run(["git", "-C", repo, "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "?"


def paired_ratio(num, den):
    """Median of num[i] / den[i] over the repetitions both have (None, or a zero
    denominator, skipped), rounded to 3 places; None when there is none."""
    ratios = [n / d for n, d in zip(num, den) if n is not None and d]
    return round(statistics.median(ratios), 3) if ratios else None

"""bench/benchlib.py — what the peer benchmarks (cpu_vs_llamacpp.py,
served_vs_llamaserver.py) share: the machine, commit and load they record, how
a report starts and is written, and the paired ratio they report (the median
of per-repetition ratios, so a load change during a run hits both sides of a
ratio alike)."""

import datetime
import json
import os
import platform
import signal
import statistics
import subprocess
import time


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


def load_avg():
    """The 1-, 5- and 15-minute load averages, to 2 places."""
    return [round(x, 2) for x in os.getloadavg()]


def report_head(bench, threads, repo):
    """The fields every report starts with: which benchmark, when (UTC), on which
    CPU and how many cores, with how many threads, at which commit of repo."""
    return {
        "bench": bench,
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%MZ"),
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "threads": threads,
        "commit": git_commit(repo),
    }


def write_report(report, path):
    """Prints the report as one JSON line, and writes that line to path when given."""
    text = json.dumps(report)
    if path:
        with open(path, "w") as f:
            f.write(text + "\n")
    print(text)


def paired_ratio(num, den):
    """Median of num[i] / den[i] over the repetitions both have (None, or a zero
    denominator, skipped), rounded to 3 places; None when there is none."""
    ratios = [n / d for n, d in zip(num, den) if n is not None and d]
    return round(statistics.median(ratios), 3) if ratios else None


def spawn_group(cmd, log):
    """Starts a server in a process group of its own (so its workers go with stop_group), its
    output into the open file log, without the systemd variables of this shell."""
    env = dict(os.environ)
    env.pop("NOTIFY_SOCKET", None)
    env.pop("LISTEN_FDS", None)
    return subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                            env=env, start_new_session=True)


def log_tail(path, n=3000):
    """The last n characters of a server's log ("" when unreadable)."""
    try:
        with open(path, "rb") as f:
            return f.read()[-n:].decode(errors="replace")
    except OSError:
        return ""


def start_and_wait(cmd, logpath, healthy, timeout=300):
    """spawn_group(cmd) with its output in logpath, then waits until healthy() holds:
    (log file, process). Exits the benchmark, naming the command and its log's tail, when the
    server dies first or is not ready in timeout seconds (then it is stopped)."""
    log = open(logpath, "ab")
    proc = spawn_group(cmd, log)
    t0 = time.time()
    while time.time() - t0 < timeout:
        if proc.poll() is not None:
            raise SystemExit("%s exited with %s before it was ready:\n%s" % (
                cmd[0], proc.returncode, log_tail(logpath)))
        if healthy():
            return log, proc
        time.sleep(0.05)
    stop_group(proc)
    raise SystemExit("%s not ready after %d s:\n%s" % (cmd[0], timeout, log_tail(logpath)))


def stop_group(proc):
    """Ends a server started in a process group of its own (start_new_session): SIGTERM to
    the group, 20 s to exit, then SIGKILL; then SIGKILL to anything of its group left."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        except ProcessLookupError:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass

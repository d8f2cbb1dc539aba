#!/usr/bin/env python3
"""test_cli_bench.py INFER INFERD — `infer bench serve` and `infer bench cache` against the
real daemon (started here on a temporary socket with the default model), with the token
counts cross-checked against the server:

- bench serve (random-token prompts of exactly --input-len tokens, ignore_eos): every
  request succeeds; each request's usage shows input-len prompt and output-len completion
  tokens; the run's totals equal the per-request sums and the daemon's own /metrics counters
  (inferd_prompt_tokens_total / inferd_generation_tokens_total) over the run; the
  percentiles are ordered; a --sweep writes one JSON run per concurrency and an SVG plot;
- bench cache: use_cache on and off each produce exactly the asked tokens, and --json
  reports both latencies and their ratio.
Timing figures are printed, never asserted. Skips (77) without the model or when inferd
cannot serve yet.
"""
import json
import os
import shutil
import sys
import tempfile
import xml.etree.ElementTree as ET

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_cli_harness import Daemon, check, main, metrics, run  # noqa: E402

INFER, INFERD = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])


def t():
    tmp = tempfile.mkdtemp()
    try:
        with Daemon(INFERD) as d:
            S = ["--socket", d.sock]
            js = os.path.join(tmp, "serve.json")
            m0 = metrics(d.sock)
            rc, out, err = run([INFER, "bench", "serve"] + S +
                               ["-N", "6", "-c", "3", "--input-len", "40", "--output-len", "12",
                                "--warmup", "1", "--json", js, "--no-progress"], timeout=600)
            print(out)
            check(rc == 0, f"bench serve rc {rc}: {err}")
            r = json.load(open(js))["runs"][0]
            check(r["completed"] == 6 and r["failed"] == 0, f"run: {r}")
            for q in r["requests"]:
                check(q["ok"] and q["prompt_tokens"] == 40 and q["output_tokens"] == 12,
                      f"request usage {q}")
            check(r["total_input_tokens"] == sum(q["prompt_tokens"] for q in r["requests"]) == 240,
                  "input total")
            check(r["total_output_tokens"] == sum(q["output_tokens"] for q in r["requests"]) == 72,
                  "output total")
            check(r["server_prompt_tokens"] == 240 and r["server_generation_tokens"] == 72,
                  f"/metrics over the run: {r['server_prompt_tokens']}, "
                  f"{r['server_generation_tokens']}")
            m1 = metrics(d.sock)
            gen = m1["inferd_generation_tokens_total"] - m0["inferd_generation_tokens_total"]
            check(gen == 72 + 12, f"daemon generated {gen} tokens, bench + warm-up asked 84")
            for k in ("ttft_ms", "tpot_ms", "itl_ms", "e2el_ms"):
                s = r[k]
                check(s["n"] > 0 and s["min"] <= s["median"] <= s["p90"] <= s["p99"] <= s["max"],
                      f"{k} not ordered: {s}")
            check(r["ttft_ms"]["n"] == 6 and r["itl_ms"]["n"] >= 6, "sample counts")

            svg = os.path.join(tmp, "sweep.svg")
            js2 = os.path.join(tmp, "sweep.json")
            rc, out, err = run([INFER, "bench", "serve"] + S +
                               ["--sweep", "1,2", "-N", "2", "--input-len", "16", "--output-len",
                                "6", "--warmup", "0", "--json", js2, "--plot", svg], timeout=600)
            print(out)
            check(rc == 0, f"sweep rc {rc}: {err}")
            runs = json.load(open(js2))["runs"]
            check([x["max_concurrency"] for x in runs] == [1, 2] and
                  all(x["total_output_tokens"] == 12 for x in runs), f"sweep: {runs}")
            check(ET.parse(svg).getroot().tag.endswith("svg"), "plot is not SVG")

            rc, out, err = run([INFER, "bench", "cache"] + S +
                               ["-n", "16", "--reps", "1", "--json"], timeout=600)
            check(rc == 0, f"bench cache rc {rc}: {err}")
            o = json.loads(out)
            print(json.dumps({k: o[k] for k in ("speedup", "prompt_tokens")}))
            check(o["use_cache_on"]["completion_tokens"] == [16] and
                  o["use_cache_off"]["completion_tokens"] == [16], f"cache tokens {o}")
            check(o["speedup"] > 0, "speedup")
            d.wait_idle()
    finally:
        shutil.rmtree(tmp)


if __name__ == "__main__":
    main(t)

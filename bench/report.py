#!/usr/bin/env python3
"""The markdown report of bench/run.sh: medians per engine and per-pair ratios against ours.

Usage: bench/report.py RECORDS MODEL... with the run's facts in the environment (REPORT_DATE,
REPORT_COMMIT, REPORT_LOAD_START, REPORT_COMMAND, REPORT_ENGINES); prints the markdown.
RECORDS holds one line of key=value fields per measurement: a bandwidth probe
(`kind=probe model=I threads=T bandwidth_gbs=G`) or a suite run (`kind=run engine=E model=I
threads=T pair=P` followed by bench/suite.c's fields), I indexing the MODEL arguments.
"""
import os
import statistics
import sys

# engine ids of the records and REPORT_ENGINES (ours first, the others compared with it) -> report names
ENGINE_NAMES = {"ours": "deepseek", "base": "deepseek (BASE_LIB)", "upstream": "llama.cpp", "ik": "ik_llama.cpp"}
CPU_FLAGS = ["avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16", "avx512vbmi", "avx_vnni", "gfni"]


def parse_records(path):
    records = []
    with open(path) as f:
        for line in f:
            fields = dict(field.split("=", 1) for field in line.split())
            records.append(fields)
    return records


def cpu_description():
    model, flags, n_cpus = "unknown", set(), 0
    with open("/proc/cpuinfo") as f:
        for line in f:
            key, _, value = line.partition(":")
            key, value = key.strip(), value.strip()
            if key == "processor":
                n_cpus += 1
            elif key == "model name" and model == "unknown":
                model = value
            elif key == "flags" and not flags:
                flags = set(value.split())
    present = [flag for flag in CPU_FLAGS if flag in flags]
    return model, n_cpus, present


def kernels_that_ran(runs, engines):
    """Per engine, the kernel levels its runs reported (records from before the field: "not recorded")."""
    parts = []
    for e in engines:
        levels = sorted({r.get("kernels", "not recorded") for r in runs if r["engine"] == e})
        parts.append(f"{ENGINE_NAMES[e]} {'/'.join(levels)}")
    return ", ".join(parts)


def load_average():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def spread(values):
    return f"{min(values):.2f}–{statistics.median(values):.2f}–{max(values):.2f}"


def model_section(index, path, records, engines):
    runs = [r for r in records if r["kind"] == "run" and r["model"] == str(index)]
    probes = {}
    for r in records:
        if r["kind"] == "probe" and r["model"] == str(index):
            probes.setdefault(r["threads"], []).append(float(r["bandwidth_gbs"]))
    first = runs[0]
    pp, tg, batch = f"pp{first['n_prompt']}", f"tg{first['n_gen']}", f"batch{first['n_seq']}"
    model_bytes = int(first["model_bytes"])
    thread_counts = sorted({r["threads"] for r in runs}, key=int)
    lines = [f"## {os.path.basename(path)} ({model_bytes / 1e9:.2f} GB of weights)", ""]

    lines.append(f"| threads | engine | load s | {pp} tok/s | {tg} tok/s | {batch} tok/s | peak RSS MiB | gen GB/s | % of probe GB/s (its min–max) |")
    lines.append("|---|---|---|---|---|---|---|---|---|")
    by_engine = {}
    for threads in thread_counts:
        for engine in engines:
            engine_runs = sorted((r for r in runs if r["threads"] == threads and r["engine"] == engine), key=lambda r: int(r["pair"]))
            by_engine[threads, engine] = engine_runs

            def median(key):
                return statistics.median(float(r[key]) for r in engine_runs)

            gen_gbs = int(engine_runs[0]["model_bytes"]) * median("tg") / 1e9
            probe = statistics.median(probes[threads])
            lines.append(f"| {threads} | {ENGINE_NAMES[engine]} | {median('load_s'):.3f} | {median('pp'):.1f} | {median('tg'):.1f} | "
                         f"{median('batch'):.1f} | {median('rss_mib'):.0f} | {gen_gbs:.1f} | {100 * gen_gbs / probe:.0f}% of {probe:.1f} "
                         f"({min(probes[threads]):.1f}–{max(probes[threads]):.1f}) |")
    lines.append("")

    lines.append(f"Per-pair ratios {ENGINE_NAMES['ours']} / other engine, min–median–max over the pairs; above 1 means "
                 f"{ENGINE_NAMES['ours']} is better (for load time and peak RSS the ratio is other / {ENGINE_NAMES['ours']}):")
    lines.append("")
    lines.append(f"| threads | versus | load time | {pp} | {tg} | {batch} | peak RSS |")
    lines.append("|---|---|---|---|---|---|---|")
    for threads in thread_counts:
        ours = by_engine[threads, "ours"]
        for engine in engines[1:]:
            other = by_engine[threads, engine]
            pairs = list(zip(ours, other))

            def ratios(key, ours_over_other):
                return [float(o[key]) / float(x[key]) if ours_over_other else float(x[key]) / float(o[key]) for o, x in pairs]

            lines.append(f"| {threads} | {ENGINE_NAMES[engine]} | {spread(ratios('load_s', False))} | {spread(ratios('pp', True))} | "
                         f"{spread(ratios('tg', True))} | {spread(ratios('batch', True))} | {spread(ratios('rss_mib', False))} |")
    lines.append("")
    return lines


def main():
    records_path, models = sys.argv[1], sys.argv[2:]
    records = parse_records(records_path)
    engines = os.environ["REPORT_ENGINES"].split()
    runs = [r for r in records if r["kind"] == "run"]
    first = runs[0]
    n_pairs = max(int(r["pair"]) for r in runs)
    cpu_model, n_cpus, flags = cpu_description()
    names = ", ".join(ENGINE_NAMES[e] for e in engines)
    lines = [
        f"# Benchmark: {names} ({os.environ['REPORT_DATE']})",
        "",
        f"- commit: `{os.environ['REPORT_COMMIT']}`",
        f"- CPU: {cpu_model}, {n_cpus} logical CPUs; flags: {' '.join(flags) or 'none of ' + ' '.join(CPU_FLAGS)}",
        f"- kernels that ran (each run's llama_print_system_info; DEEPSEEK_KERNELS={os.environ.get('DEEPSEEK_KERNELS', 'unset')}): {kernels_that_ran(runs, engines)}",
        f"- load average (1, 5, 15 min): start {os.environ['REPORT_LOAD_START']}, end {load_average()}",
        f"- command: `{os.environ['REPORT_COMMAND']}`",
        f"- method: per model and thread count, rounds of fresh processes in the order {names} (rounds: {n_pairs}), after one "
        f"uncounted warm-up run of each engine per model; numbers are medians over the rounds. "
        f"load = llama_model_load_from_file with default parameters (mmap); pp{first['n_prompt']} = one llama_decode of "
        f"{first['n_prompt']} tokens; tg{first['n_gen']} = {first['n_gen']} single-token greedy decodes; "
        f"batch{first['n_seq']} = {first['n_seq']} sequences decoded together, {first['n_batch_steps']} steps, aggregate tokens/s; "
        f"peak RSS = ru_maxrss (includes the mmapped weights read); gen GB/s = llama_model_size × tg tokens/s, "
        f"against the median of the read-bandwidth probes (bench/bandwidth.c, same thread count, one before each round: "
        f"the machine's bandwidth changes from one minute to the next).",
        "",
    ]
    for index, path in enumerate(models):
        lines += model_section(index, path, records, engines)
    lines += ["<details><summary>raw records</summary>", "", "```"]
    with open(records_path) as f:
        lines += [line.rstrip("\n") for line in f]
    lines += ["```", "", "</details>"]
    print("\n".join(lines))


if __name__ == "__main__":
    main()

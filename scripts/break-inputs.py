#!/usr/bin/env python3
"""Break campaign over coldstart's input handling (issue 10: no signal on any input).

Generates hostile inputs in six classes and runs each through the real binary in compile-only
mode (`coldstart replay FILE --device compile-only --strategy none`, or report / compare for their
inputs), each under a wall-clock limit. Per class it counts: inputs tried, clean errors (exit 2
with a message naming the file and line, or the --set argument; for unreadable files the path),
runs that were accepted (exit 0), signals, hangs (past the limit) and anything else (exit 1 or
an exit 2 without a location), and prints the offenders. Exit status 1 when any input ended by a
signal, hung, or failed uncleanly.

    scripts/break-inputs.py [--bin build/coldstart] [--timeout 30] [--only CLASS]... [-v]

One file over 600 lines on purpose: a stand-alone campaign script, each class's generator a few
dozen lines, run by hand (not by CI); splitting it would only add an import path to set up.

Classes: alias (YAML alias bombs), files (FIFOs, devices, directories, oversized files as any
input), overflow (integers whose products overflow), config (numbers, types and syntax in
config.json), duplicates (repeated keys in YAML and JSON), documents (several YAML documents),
validation (issue 26: shapes past the kernels' grid and storage limits, values no kernel runs,
NaN, NUL, tags, unknown dtypes; each must be refused with exit 2 before anything runs, so here an
accepted run or an exit 1 counts as a failure; and two inputs that must be accepted), results
(issue 26: outputs at links, devices or one path twice; results files out of range or huge; names
with control characters on the terminal; a link planted in the kernel cache).
Accepted inputs really run (one layer of Qwen3-8B, 16 prompt tokens); --cache-dir keeps their
kernel compiles warm across inputs.
"""
import argparse
import json
import os
import re
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

BASE_ENGINE = {
    "max_num_seqs": "2",
    "max_num_batched_tokens": "64",
    "max_model_len": "256",
    "block_size": "16",
    "kv_cache_dtype": "auto",
    "cudagraph_mode": "none",
}


def scenario(config="cfg.json", overrides="{num_hidden_layers: 1}", engine=None, extra="",
             requests="[{prompt_tokens: 16, decode_steps: 1}]", strategies="{none: []}"):
    """A small valid scenario text, with the given parts replaced."""
    e = dict(BASE_ENGINE)
    e.update(engine or {})
    lines = ["name: t", "model:", f"  config: {config}", f"  overrides: {overrides}", "engine:"]
    lines += [f"  {k}: {v}" for k, v in e.items() if v is not None]
    lines += [f"requests: {requests}", f"strategies: {strategies}"]
    return "\n".join(lines) + "\n" + extra


def bomb(levels, fanout=9, leaf="x"):
    """`levels` anchors, each a list of `fanout` uses of the one before (fanout^levels values)."""
    s = "&a0 [" + ", ".join([leaf] * fanout) + "]"
    for lvl in range(1, levels + 1):
        s = "[" + s + f", &a{lvl} [" + ", ".join([f"*a{lvl - 1}"] * fanout) + "]]"
    return s


class Campaign:
    def __init__(self, args):
        self.args = args
        self.bin = os.path.abspath(args.bin)
        self.dir = tempfile.mkdtemp(prefix="cs-break-")
        self.cache = args.cache_dir or os.path.join(self.dir, "cache")
        os.makedirs(self.cache, exist_ok=True)
        with open(os.path.join(ROOT, "fixtures/hf-configs/qwen3-8b.json")) as f:
            self.qwen = f.read()
        self.stats = {}
        self.bad = []
        self.n = 0

    # ---- running

    def path(self, name):
        return os.path.join(self.dir, name)

    def write(self, name, text):
        p = self.path(name)
        if os.path.lexists(p):
            os.remove(p)
        with open(p, "w", encoding="utf-8", errors="surrogateescape") as f:
            f.write(text)
        return p

    def config(self, text=None, name="cfg.json"):
        return self.write(name, self.qwen if text is None else text)

    def run(self, cls, label, argv, where=None, must_refuse=False, must_accept=False):
        """Runs coldstart with argv; `where` is the regex a clean error must contain (default:
        file:line: or --set)."""
        self.n += 1
        s = self.stats.setdefault(cls, {"tried": 0, "clean": 0, "accepted": 0, "signal": 0,
                                         "hang": 0, "other": 0, "max_s": 0.0})
        s["tried"] += 1
        t0 = time.monotonic()
        try:
            p = subprocess.run([self.bin] + argv, cwd=self.dir, capture_output=True,
                               timeout=self.args.timeout, stdin=subprocess.DEVNULL)
            rc, out = p.returncode, (p.stderr + p.stdout).decode("utf-8", "replace")
        except subprocess.TimeoutExpired as e:
            rc, out = None, ((e.stderr or b"") + (e.stdout or b"")).decode("utf-8", "replace")
        secs = time.monotonic() - t0
        s["max_s"] = max(s["max_s"], secs)
        pattern = where or r"(\S+:\d+(:\d+)?: |--set \S+: )"
        if rc is None:
            kind = "hang"
        elif rc < 0 or rc >= 128:
            kind = "signal"
        elif rc == 0:
            kind = "accepted"
        elif rc == 2 and re.search(pattern, out):
            kind = "clean"
        else:
            kind = "other"
        s[kind] += 1
        # An input the harness can refuse must never run (exit 0) nor fail after validation
        # (exit 1); a valid one must run.
        failed = kind in ("hang", "signal", "other") or (must_refuse and kind == "accepted") or \
            (must_accept and kind != "accepted")
        if failed:
            self.bad.append((cls, label, kind, rc, out.strip()[-400:]))
        if self.args.verbose:
            first = out.strip().splitlines()[0][:160] if out.strip() else ""
            print(f"[{cls}] {label}: {kind} rc={rc} {secs:.1f}s  {first}", flush=True)

    def replay(self, cls, label, text=None, file=None, sets=(), where=None, must_refuse=False,
               must_accept=False):
        f = file or self.write("s.yaml", text)
        # The watchdog stops a slow child first: a run past the limit is then the parent's hang.
        argv = ["replay", f, "--device", "compile-only", "--strategy", "none",
                "--cache-dir", self.cache, "--timeout", str(max(1, int(self.args.timeout) - 10))]
        for s in sets:
            argv += ["--set", s]
        self.run(cls, label, argv, where, must_refuse, must_accept)

    # ---- classes

    def alias(self):
        self.config()
        for levels in (3, 5, 6, 7, 9):
            b = bomb(levels)
            self.replay("alias", f"expect {levels}", scenario(extra=f"expect: {b}\n"))
            self.replay("alias", f"overrides {levels}", scenario(overrides=f"{{x: {b}}}"))
            self.replay("alias", f"matrix {levels}",
                        scenario(extra=f"matrix: {{engine.max_num_seqs: {b}}}\n"))
            self.replay("alias", f"requests {levels}", scenario(requests=b))
            self.replay("alias", f"strategies {levels}", scenario(strategies=f"{{none: {b}}}"))
            self.replay("alias", f"capture sizes {levels}",
                        scenario(engine={"cudagraph_mode": "piecewise",
                                         "cudagraph_capture_sizes": b}))
            self.replay("alias", f"--set {levels}", scenario(), sets=[f"model.overrides.x={b}"])
        for fan in (2, 3, 8):
            self_ref = "&c [" + ", ".join(["*c"] * fan) + "]"
            self.replay("alias", f"self-referring list x{fan}", scenario(extra=f"expect: {self_ref}\n"))
            m = "&m {" + ", ".join(f"k{i}: *m" for i in range(fan)) + "}"
            self.replay("alias", f"self-referring map x{fan}",
                        scenario(overrides=f"{{rope_scaling: {m}}}"))
        big = bomb(8)
        self.replay("alias", "bomb as a key", scenario(extra=f"description: x\n? {big}\n: 1\n"))
        self.replay("alias", "bomb in a map of maps",
                    scenario(extra="expect:\n  - &r {strategy: none, hot_path_kernels: " + big +
                             "}\n  - *r\n"))
        self.replay("alias", "small aliases (valid)",
                    scenario(strategies="{none: &w [], again: *w}"))

    def files(self):
        self.config()
        fifo = self.path("fifo")
        if os.path.exists(fifo):
            os.remove(fifo)
        os.mkfifo(fifo)
        link = self.path("link-to-fifo")
        if os.path.lexists(link):
            os.remove(link)
        os.symlink(fifo, link)
        sock = self.path("sock")
        if os.path.lexists(sock):
            os.remove(sock)
        srv = socket.socket(socket.AF_UNIX)
        srv.bind(sock)
        os.makedirs(self.path("adir"), exist_ok=True)
        big = self.write("big.json", '{"pad": "' + "x" * (17 << 20) + '"}')
        bigyaml = self.write("big.yaml", scenario() + "#" + "x" * (17 << 20) + "\n")
        specials = {"FIFO": fifo, "link to FIFO": link, "socket": sock, "/dev/zero": "/dev/zero",
                    "/dev/urandom": "/dev/urandom", "/dev/null": "/dev/null", "directory":
                    self.path("adir"), "17 MiB": None, "missing": self.path("missing")}
        for name, p in specials.items():
            target = bigyaml if name == "17 MiB" else p
            self.replay("files", f"scenario {name}", file=target, where=re.escape(target))
            cfg = big if name == "17 MiB" else p
            self.replay("files", f"model.config {name}", scenario(config=cfg),
                        where=re.escape(cfg))
            self.replay("files", f"--set model.config {name}", scenario(),
                        sets=[f"model.config={cfg}"], where=re.escape(cfg))
            for cmd in (["report"], ["compare", self.path("ok.json")], ["merge", "-o",
                                                                         self.path("m.json")]):
                self.run("files", f"{cmd[0]} {name}", cmd[:1] + [target] + cmd[1:],
                         where=re.escape(target))
        # tuned tables
        tdir = self.path("tables/fused_moe")
        os.makedirs(tdir, exist_ok=True)
        tf = os.path.join(tdir, "E=8,N=64.json")
        os.mkfifo(tf)
        self.replay("files", "tuned table FIFO",
                    scenario(engine={"tuned_config_dir": "tables"}), where=re.escape(tf))
        os.remove(tf)
        with open(tf, "w") as f:
            f.write('{"pad": "' + "x" * (17 << 20) + '"}')
        self.replay("files", "tuned table 17 MiB",
                    scenario(engine={"tuned_config_dir": "tables"}), where=re.escape(tf))
        shutil.rmtree(self.path("tables"))
        # Symbolic links to an enclosing directory below tuned_config_dir (an endless walk).
        for n in (2, 40):
            os.makedirs(self.path("tables"), exist_ok=True)
            for k in range(n):
                os.symlink(".", self.path(f"tables/l{k}"))
            self.replay("files", f"tuned_config_dir with {n} links to itself",
                        scenario(engine={"tuned_config_dir": "tables"}),
                        where=r"(\S+:\d+(:\d+)?: )")
            shutil.rmtree(self.path("tables"))
        srv.close()

    def overflow(self):
        self.config()
        big = ["2147483647", "2147483648", "4294967296", "1152921504606849024",
               "9223372036854775807", "9223372036854775808", "18446744073709551616",
               "-9223372036854775808", "1" + "0" * 30]
        for v in big:
            self.replay("overflow", f"num_gpu_blocks {v}",
                        scenario(engine={"num_gpu_blocks": v}))
            for key in ("max_num_seqs", "max_num_batched_tokens", "max_model_len",
                        "tensor_parallel_size", "num_speculative_tokens"):
                self.replay("overflow", f"{key} {v}", scenario(engine={key: v}))
            for key in ("prompt_tokens", "decode_steps", "arrival_step"):
                self.replay("overflow", f"requests.0.{key} {v}", scenario(),
                            sets=[f"requests.0.{key}={v}"])
            self.replay("overflow", f"capture size {v}",
                        scenario(engine={"cudagraph_mode": "piecewise",
                                         "cudagraph_capture_sizes": f"[1, {v}]"}))
            for key in ("hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim",
                        "vocab_size", "intermediate_size", "max_position_embeddings"):
                cfg = json.loads(self.qwen)
                cfg[key] = int(v) if not v.startswith("1000") else float(v)
                self.config(json.dumps(cfg, indent=1))
                self.replay("overflow", f"config {key} {v}", scenario())
            self.config()
        self.replay("overflow", "block_size 256 x 2^31-1 blocks (valid)",
                    scenario(engine={"block_size": "256", "num_gpu_blocks": "2147483647"}))
        self.replay("overflow", "long max_model_len x max_num_seqs",
                    scenario(engine={"max_num_seqs": "1024", "max_num_batched_tokens": "4096",
                                     "max_model_len": "2147483647", "block_size": "1",
                                     "allow_long_max_model_len": "true"}))
        for f in ("1e300", "1e308", "-1.0", "0.0", "1e-300", "Infinity", "-Infinity", "NaN"):
            for t in ("yarn", "dynamic", "linear"):
                cfg = self.qwen.replace('"rope_scaling": null',
                                        f'"rope_scaling": {{"rope_type": "{t}", "factor": {f}, '
                                        f'"original_max_position_embeddings": 4096}}')
                self.config(cfg)
                self.replay("overflow", f"rope {t} factor {f}",
                            scenario(engine={"max_model_len": "50000"}))
        self.config()
        for v in ("1e308", "-1", "1e-320", ".inf", ".nan"):
            self.replay("overflow", f"timeout_s {v}", scenario(extra=f"timeout_s: {v}\n"))
            self.replay("overflow", f"gpu_memory_utilization {v}",
                        scenario(engine={"gpu_memory_utilization": v}))
        # Family keys read by the model families (products of config integers).
        fams = [("nemotron-3-nano-30b-a3b.json", 8, ["mamba_num_heads", "mamba_head_dim",
                                                     "ssm_state_size", "n_groups", "chunk_size",
                                                     "n_routed_experts", "moe_intermediate_size",
                                                     "moe_latent_size", "conv_kernel"]),
                ("qwen3-next-80b-a3b.json", 4, ["linear_num_key_heads", "linear_num_value_heads",
                                                "linear_key_head_dim", "linear_value_head_dim",
                                                "num_experts", "moe_intermediate_size",
                                                "full_attention_interval"])]
        for name, layers, keys in fams:
            with open(os.path.join(ROOT, "fixtures/hf-configs", name)) as f:
                base = json.load(f)
            for key in keys:
                for v in (2147483647, 2147483648, 18446744073709551615, -2147483648, "64", 64.5):
                    cfg = dict(base)
                    cfg[key] = v
                    self.config(json.dumps(cfg, indent=1), name="fam.json")
                    self.replay("overflow", f"{name} {key} {v!r}",
                                scenario(config="fam.json",
                                         overrides=f"{{num_hidden_layers: {layers}}}",
                                         engine={"tuned_config_dir":
                                                 os.path.join(ROOT, "fixtures/tuned-configs")}))

    def config_json(self):
        q = self.qwen
        cases = {
            "eps 1e400": q.replace('"rms_norm_eps": 1e-06', '"rms_norm_eps": 1e400'),
            "eps -1e400": q.replace('"rms_norm_eps": 1e-06', '"rms_norm_eps": -1e400'),
            "eps 1e-400": q.replace('"rms_norm_eps": 1e-06', '"rms_norm_eps": 1e-400'),
            "400 digits": q.replace('"hidden_size": 4096', '"hidden_size": ' + "9" * 400),
            "nested 1e999": q.replace('"rope_scaling": null', '"rope_scaling": {"f": [1, 1e999]}'),
            "string int": q.replace('"hidden_size": 4096', '"hidden_size": "4096"'),
            "float int": q.replace('"hidden_size": 4096', '"hidden_size": 4096.0'),
            "bool int": q.replace('"hidden_size": 4096', '"hidden_size": true'),
            "list int": q.replace('"hidden_size": 4096', '"hidden_size": [4096]'),
            "object int": q.replace('"hidden_size": 4096', '"hidden_size": {"a": 1}'),
            "null required": q.replace('"hidden_size": 4096', '"hidden_size": null'),
            "Infinity int": q.replace('"hidden_size": 4096', '"hidden_size": Infinity'),
            "NaN eps": q.replace('"rms_norm_eps": 1e-06', '"rms_norm_eps": NaN'),
            "string eps": q.replace('"rms_norm_eps": 1e-06', '"rms_norm_eps": "small"'),
            "string theta": q.replace('"rope_theta": 1000000', '"rope_theta": "big"'),
            "int dtype": q.replace('"torch_dtype": "bfloat16"', '"torch_dtype": 16'),
            "architectures string": q.replace('[\n    "Qwen3ForCausalLM"\n  ]', '"Qwen3"'),
            "architectures []": q.replace('[\n    "Qwen3ForCausalLM"\n  ]', "[]"),
            "architectures [1]": q.replace('[\n    "Qwen3ForCausalLM"\n  ]', "[1]"),
            "rope_scaling string": q.replace('"rope_scaling": null', '"rope_scaling": "yarn"'),
            "rope_type int": q.replace('"rope_scaling": null',
                                       '"rope_scaling": {"rope_type": 3, "factor": 2}'),
            "rope factor string": q.replace('"rope_scaling": null',
                                            '"rope_scaling": {"type": "yarn", "factor": "2"}'),
            "rope orig string": q.replace(
                '"rope_scaling": null', '"rope_scaling": {"type": "yarn", "factor": 2, '
                '"original_max_position_embeddings": "4096"}'),
            "tie string": q.replace('"tie_word_embeddings": false', '"tie_word_embeddings": "no"'),
            "invalid UTF-8 key": q.replace('"attention_bias"', '"attention_\udcff"'),
            "invalid UTF-8 value": q.replace('"silu"', '"si\udcfflu"'),
            "truncated": q[: len(q) // 2],
            "empty": "",
            "whitespace": "   \n",
            "top-level list": "[1, 2]",
            "top-level string": '"x"',
            "trailing comma": q.replace('"vocab_size": 151936\n', '"vocab_size": 151936,\n'),
            "comment": "// hi\n" + q,
            "BOM": "\ufeff" + q,
            "deep 100": q.replace('"rope_scaling": null', '"rope_scaling": ' + "[" * 100 + "]" * 100),
            "deep 100000": q.replace('"rope_scaling": null',
                                     '"rope_scaling": ' + "[" * 100000 + "]" * 100000),
            "deep objects": q.replace('"rope_scaling": null',
                                      '"rope_scaling": ' + '{"a":' * 5000 + "1" + "}" * 5000),
            "NUL byte": q.replace('"silu"', '"si\x00lu"'),
            "bare NUL": q + "\x00",
            "second value": q + "{}",
            "unterminated string": q.replace('"silu"', '"silu'),
            "bad escape": q.replace('"silu"', '"si\\qlu"'),
            "lone surrogate escape": q.replace('"silu"', '"\\ud800"'),
            "-Infinity int": q.replace('"hidden_size": 4096', '"hidden_size": -Infinity'),
            "negative zero": q.replace('"hidden_size": 4096', '"hidden_size": -0'),
            "huge exponent int": q.replace('"hidden_size": 4096', '"hidden_size": 4096e0'),
        }
        for label, text in cases.items():
            self.config(text)
            self.replay("config", label, scenario())
        self.config()

    def duplicates(self):
        q = self.qwen
        cases = {
            "top-level": q.replace('"hidden_size": 4096,', '"hidden_size": 4096, "hidden_size": 8,'),
            "same value": q.replace('"hidden_size": 4096,', '"hidden_size": 4096, "hidden_size": 4096,'),
            "escaped": q.replace('"hidden_size": 4096,', '"hidden_size": 4096, "hidden\\u005fsize": 8,'),
            "nested": q.replace('"rope_scaling": null',
                                '"rope_scaling": {"factor": 2.0, "factor": 4.0, "type": "yarn"}'),
            "in list of objects": q.replace('"rope_scaling": null',
                                            '"rope_scaling": [{"a": 1}, {"b": 1, "b": 2}]'),
            "unused key": q.replace('"use_cache": true,', '"use_cache": true, "use_cache": false,'),
        }
        for label, text in cases.items():
            self.config(text)
            self.replay("duplicates", f"config.json {label}", scenario())
        self.config()
        yaml_cases = {
            "top-level": scenario(extra="name: again\n"),
            "engine": scenario(engine={"block_size": "16\n  block_size: 32"}),
            "model": scenario(overrides="{num_hidden_layers: 1}\n  config: cfg.json"),
            "overrides": scenario(overrides="{num_hidden_layers: 1, num_hidden_layers: 2}"),
            "overrides nested": scenario(overrides="{num_hidden_layers: 1, rope_scaling: "
                                                   "{factor: 2.0, factor: 4.0}}"),
            "request": scenario(requests="[{prompt_tokens: 16, decode_steps: 1, decode_steps: 2}]"),
            "strategies": scenario(strategies="{none: [], none: []}"),
            "long-form strategy": scenario(strategies="{none: {warmers: [], warmers: []}}"),
            "expect rule": scenario(extra="expect:\n  - {strategy: none, outcome: ok, outcome: crash}\n"),
            "matrix": scenario(extra="matrix:\n  engine.block_size: [16]\n  engine.block_size: [32]\n"),
            "quoted vs plain": scenario(extra='"name": again\n'),
            "merge key": scenario(extra="description: &d x\n<<: {name: y}\n"),
        }
        for label, text in yaml_cases.items():
            self.replay("duplicates", f"yaml {label}", text)

    def documents(self):
        self.config()
        base = scenario()
        cases = {
            "second document": base + "---\nname: other\n",
            "second document of a list": base + "---\n- 1\n",
            "second document scalar": base + "--- x\n",
            "three documents": base + "---\na: 1\n---\nb: 2\n",
            "after end marker": base + "...\n---\nname: x\n",
            "second document invalid": base + "---\n: : [\n",
            "second document bomb": base + "---\n" + bomb(9) + "\n",
            "empty second document (valid)": base + "---\n",
            "leading marker (valid)": "---\n" + base,
            "end marker only (valid)": base + "...\n",
            "--set value with two documents": None,
        }
        for label, text in cases.items():
            if text is None:
                self.replay("documents", label, base, sets=["engine.block_size=16\n---\n32"])
            else:
                self.replay("documents", label, text)

    def validation(self):
        """Issue 26: inputs validation must refuse (exit 2 naming file, line or key) that used to
        be accepted silently or fail in the child with exit 1."""
        cls = "validation"
        q = json.loads(self.qwen)

        def cfg_case(label, changes, base=None, name="cfg.json", layers=1, engine=None):
            cfg = dict(base if base is not None else q)
            cfg.update(changes)
            self.config(json.dumps(cfg, indent=1), name=name)
            self.replay(cls, label, scenario(config=name, overrides=f"{{num_hidden_layers: {layers}}}",
                                             engine=engine), must_refuse=True)

        # (a) failed in the child with exit 1 after validation passed
        cfg_case("heads = KV heads = 2^30", {"num_attention_heads": 1 << 30,
                                             "num_key_value_heads": 1 << 30})
        cfg_case("hidden = intermediate = 2^31-1", {"hidden_size": 2147483647,
                                                    "intermediate_size": 2147483647})
        self.config()
        self.replay(cls, "max_num_batched_tokens 2^31-1",
                    scenario(engine={"max_num_batched_tokens": "2147483647"}), must_refuse=True)
        self.replay(cls, "max_num_seqs and max_num_batched_tokens 2^31-1",
                    scenario(engine={"max_num_seqs": "2147483647",
                                     "max_num_batched_tokens": "2147483647"}), must_refuse=True)
        self.replay(cls, "num_hidden_layers 2^31-1 (override)",
                    scenario(overrides="{num_hidden_layers: 2147483647}"), must_refuse=True)
        cfg_case("num_hidden_layers 2^31-1 (config.json)", {"num_hidden_layers": 2147483647},
                 layers=2147483647)
        tuned = {"tuned_config_dir": os.path.join(ROOT, "fixtures/tuned-configs")}
        with open(os.path.join(ROOT, "fixtures/hf-configs/nemotron-3-nano-30b-a3b.json")) as f:
            nemo = json.load(f)
        for k, v in (("n_group", 3), ("topk_group", 5)):
            cfg_case(f"nemotron {k} {v}", {k: v}, base=nemo, name="fam.json", layers=8,
                     engine=tuned)
        # tuned tables the kernels cannot launch with (read in the child before)
        for label, table in (("BLOCK_SIZE_K 1e9", '{"16": {"BLOCK_SIZE_K": 1e9}}'),
                             ("BLOCK_SIZE_K 1000000000", '{"16": {"BLOCK_SIZE_K": 1000000000}}'),
                             ("batch size key NaN", '{"NaN": {"BLOCK_SIZE_K": 64}}')):
            tdir = self.path("tuned")
            shutil.rmtree(tdir, ignore_errors=True)
            os.makedirs(os.path.join(tdir, "fused_moe"))
            with open(os.path.join(tdir, "fused_moe", "t.json"), "w") as f:
                f.write(table)
            cfg_case(f"tuned table {label}", {}, base=nemo, name="fam.json", layers=8,
                     engine={"tuned_config_dir": tdir})
        # (b) accepted silently
        cfg_case("torch_dtype float7", {"torch_dtype": "float7"})
        self.config(self.qwen + "\x00")
        self.replay(cls, "config.json then a NUL byte", scenario(), must_refuse=True)
        self.config(self.qwen + "\x00{\"hidden_size\": 1}")
        self.replay(cls, "config.json, NUL, a second object", scenario(), must_refuse=True)
        for t in ("yarn", "linear", "llama3"):
            self.config(self.qwen.replace(
                '"rope_scaling": null', f'"rope_scaling": {{"rope_type": "{t}", "factor": NaN, '
                '"original_max_position_embeddings": 4096}'))
            self.replay(cls, f"rope {t} factor NaN", scenario(), must_refuse=True)
        self.config(self.qwen.replace('"rms_norm_eps": 1e-06', '"rms_norm_eps": NaN'))
        self.replay(cls, "rms_norm_eps NaN", scenario(), must_refuse=True)
        self.config()
        self.replay(cls, "YAML tag !foo", scenario(engine={"max_num_seqs": "!foo 2"}),
                    must_refuse=True)
        self.replay(cls, "YAML tag !!binary", scenario(extra="description: !!binary aGVsbG8=\n"),
                    must_refuse=True)
        self.replay(cls, "YAML tag in --set", scenario(), sets=["engine.max_num_seqs=!foo 2"],
                    must_refuse=True)
        with open(os.path.join(ROOT, "fixtures/hf-configs/deepseek-v4-flash.json")) as f:
            v4 = json.load(f)
        v4_engine = {"block_size": "64", "kv_cache_dtype": "auto"}
        for k, v in (("qk_rope_head_dim", 1024), ("hc_eps", -1), ("index_topk", 0),
                     ("expert_dtype", "int3")):
            cfg_case(f"deepseek {k} {v}", {k: v}, base=v4, name="fam.json", layers=4,
                     engine=v4_engine)
        with open(os.path.join(ROOT, "fixtures/hf-configs/qwen3-next-80b-a3b.json")) as f:
            nxt = json.load(f)
        cfg_case("qwen3-next decoder_sparse_step 0", {"decoder_sparse_step": 0}, base=nxt,
                 name="fam.json", layers=4, engine=tuned)
        # (c) wrong refusals: one must run, one must be refused as a bad value at its key
        self.config()
        self.replay(cls, "overrides sliding_window .nan",
                    scenario(overrides="{num_hidden_layers: 1, sliding_window: .nan}"),
                    where=r"sliding_window", must_refuse=True)
        nl = self.path("cf\ng.json")
        with open(nl, "w") as f:
            f.write(self.qwen)
        self.replay(cls, "config path with a newline (valid)", scenario(config='"cf\\ng.json"'),
                    must_accept=True)

    def results(self):
        """Issue 26: outputs, results files, the terminal and the kernel cache. Outputs at a
        symbolic link or device and two outputs on one path are refused before anything runs;
        results files with values out of range or of the wrong type are refused naming the file;
        huge results files are read in linear time (accepted within the limit); names with
        control characters reach the terminal escaped."""
        cls = "results"
        self.config()
        s = self.write("s.yaml", scenario())
        out = r"output '"
        target = self.write("target.json", "{}")
        link = self.path("link.json")
        if os.path.lexists(link):
            os.remove(link)
        os.symlink(target, link)
        for label, argv in (("--json at a symbolic link", ["--json", link]),
                            ("--json /dev/null", ["--json", "/dev/null"]),
                            ("--json X --md X", ["--json", self.path("x.out"), "--md", self.path("x.out")]),
                            ("--md at a symbolic link", ["--md", link])):
            self.run(cls, label, ["replay", s, "--device", "compile-only", "--strategy", "none"] + argv,
                     where=out, must_refuse=True)
        with open(target) as f:
            if f.read() != "{}":
                self.bad.append((cls, "symbolic link target", "other", None, "was written through"))
        # Results files: each value is refused naming the file (report, compare, merge).
        ok = json.load(open(self.path("ok.json")))
        def bad_results(label, change):
            doc = json.loads(json.dumps(ok))
            change(doc)
            f = self.write("bad-results.json", json.dumps(doc))
            self.run(cls, f"report: {label}", ["report", f], where=re.escape(f) + ": ",
                     must_refuse=True)
        bad_results("startup_ms 1.7976e308", lambda d: d["results"][0].update(startup_ms=1.7976e308))
        bad_results("phase ms 1e300", lambda d: d["results"][0]["phases"].append({"name": "x", "ms": 1e300}))
        bad_results("sm 1e300", lambda d: d["meta"].update(sm=1e300))
        bad_results("meta 5", lambda d: d.update(meta=5))
        bad_results("scenario.model \"x\"", lambda d: d["scenario"].update(model="x"))
        # Huge but valid files: linear time (300,000 phases; 100,000 hot-path compiles).
        big = json.loads(json.dumps(ok))
        big["results"][0]["phases"] = [{"name": f"p{i}", "ms": 1.0, "request": -1} for i in range(300000)]
        f = self.write("big-phases.json", json.dumps(big))
        self.run(cls, "merge: 300,000 phases (valid)", ["merge", f, "-o", self.path("m.json")],
                 must_accept=True)
        big = json.loads(json.dumps(ok))
        big["results"][0]["hot_path_compiles"] = [
            {"kernel": f"k{i}", "key": f"k{i}", "compile_ms": 1.0, "phase": "prefill",
             "source": "nvrtc"} for i in range(100000)]
        f = self.write("big-compiles.json", json.dumps(big))
        self.run(cls, "report: 100,000 hot-path compiles (valid)", ["report", f, "--html",
                 self.path("big.html")], must_accept=True)
        # The terminal: control characters in names come out escaped.
        evil = json.loads(json.dumps(ok))
        evil["scenario"]["name"] = "x\x1b]0;title\x07\r\nFAKE"
        evil["results"][0]["strategy"] = "none\x1b[2J"
        evil["results"][0]["error"] = "e\x1b[31m\rr"
        f = self.write("evil.json", json.dumps(evil))
        self.n += 1
        st = self.stats.setdefault(cls, {"tried": 0, "clean": 0, "accepted": 0, "signal": 0,
                                         "hang": 0, "other": 0, "max_s": 0.0})
        st["tried"] += 1
        p = subprocess.run([self.bin, "report", f], cwd=self.dir, capture_output=True,
                           timeout=self.args.timeout)
        raw = p.stdout + p.stderr
        if p.returncode == 0 and b"\x1b" not in raw and b"\r" not in raw and b"\x07" not in raw:
            st["accepted"] += 1
        else:
            st["other"] += 1
            self.bad.append((cls, "terminal escapes", "other", p.returncode, repr(raw[-400:])))
        # The kernel cache: a symbolic link planted in it is not written through.
        cache = self.path("cache-planted")
        shutil.rmtree(cache, ignore_errors=True)
        os.makedirs(cache)
        elsewhere = self.path("elsewhere")
        shutil.rmtree(elsewhere, ignore_errors=True)
        os.makedirs(elsewhere)
        os.symlink(elsewhere, os.path.join(cache, "autotune"))
        self.run(cls, "cache with a planted autotune link (valid)",
                 ["replay", s, "--device", "compile-only", "--strategy", "none", "--cache-dir", cache],
                 must_accept=True)
        if os.listdir(elsewhere):
            self.bad.append((cls, "planted link", "other", None, "the cache merge wrote through it"))

    # ---- report

    def report(self):
        cols = ["tried", "clean", "accepted", "signal", "hang", "other", "max_s"]
        print(f"{'class':<12}" + "".join(f"{c:>10}" for c in cols))
        for cls, s in self.stats.items():
            print(f"{cls:<12}" + "".join(
                f"{s[c]:>10.1f}" if c == "max_s" else f"{s[c]:>10}" for c in cols))
        for cls, label, kind, rc, out in self.bad:
            print(f"\n[{cls}] {label}: {kind} (rc={rc})\n  " + out.replace("\n", "\n  "))
        return 1 if self.bad else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default=os.path.join(ROOT, "build/coldstart"))
    ap.add_argument("--timeout", type=float, default=30)
    ap.add_argument("--cache-dir", help="kernel cache kept across inputs (default: a new one)")
    ap.add_argument("--only", action="append",
                    choices=["alias", "files", "overflow", "config", "duplicates", "documents",
                             "validation", "results"])
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()
    c = Campaign(args)
    try:
        # A result file for compare's second argument, and a warm kernel cache.
        c.config()
        c.write("s.yaml", scenario())
        subprocess.run([c.bin, "replay", c.path("s.yaml"), "--device", "compile-only", "--strategy",
                        "none", "--cache-dir", c.cache, "--json", c.path("ok.json")],
                       cwd=c.dir, capture_output=True, timeout=600)
        steps = {"alias": c.alias, "files": c.files, "overflow": c.overflow,
                 "config": c.config_json, "duplicates": c.duplicates, "documents": c.documents,
                 "validation": c.validation, "results": c.results}
        for name, step in steps.items():
            if not args.only or name in args.only:
                step()
        return c.report()
    finally:
        shutil.rmtree(c.dir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

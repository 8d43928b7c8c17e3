"""Entry point of an evaluation child (started from the pre-warmed forkserver).

Order matters: harden the process, capture trusted references (timer, guard), draw the
trial inputs and report their digests, and only then load the candidate's extension and
model_new.py.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import secrets
import sys
import time
import traceback
import types
import weakref
from typing import Any

import torch

from cuda_agent.sandbox_pool.harness.child.guard import ComputeGuard
from cuda_agent.sandbox_pool.harness.child.hardening import harden_child
from cuda_agent.sandbox_pool.harness.child.heap import keep_freed_memory
from cuda_agent.sandbox_pool.harness.child.timing import Timer
from cuda_agent.sandbox_pool.harness.child.turns import CANDIDATE_FILE, Turns
from cuda_agent.sandbox_pool.harness.clock import NULL_CALLS, mark
from cuda_agent.sandbox_pool.harness.compare import (
    encode_prints,
    fingerprint,
    flatten_outputs,
    share_memory,
    signature,
    storage_spans,
    storage_tensors,
)
from cuda_agent.sandbox_pool.harness.device_memory import ahead_budget
from cuda_agent.sandbox_pool.harness.inputs import DISTRIBUTIONS, digest, draw
from cuda_agent.sandbox_pool.harness.output_buffer import SharedOutputs, attach
from cuda_agent.sandbox_pool.harness.protocol import INIT_FILE, ChildSpec, Draw, output_file
from cuda_agent.sandbox_pool.harness.stats import relative_half_width


timer_now = time.perf_counter  # captured before any candidate code is loaded
WARMUP_SECONDS = {"cpu": 0.05, "cuda": 0.2}
MAX_WARMUP_CALLS = 1000
HELD_OUTPUTS = 2
"""Earlier calls' outputs kept alive during the next call (`check_fresh`): a kernel cycling through more
buffers than this passes, holding that much memory."""
WARM_SEED_OFFSET = 3_000_000
"""Warm-up draws: the first timed draws' seeds plus this (a range no trial, timed call or twin uses)."""
AHEAD_STEP_DRAWS = 8
"""Draws per gated step: a shared step stays short, so a waiting timed window is never held up long."""


class _Stop(Exception):
    """Ends the child after a reported failure."""


class Child:
    def __init__(self, spec: ChildSpec, conn: Any, stamps: Any = None, outputs_fd: int | None = None) -> None:
        self.spec = spec
        self.conn = conn
        # The outside clock's socket (clock.py): only a candidate's calls are judged by it, and a baseline's
        # hundreds of unhandshaken calls would fill a socket the parent reads at messages only.
        self.stamps = stamps if spec.role == "candidate" else None
        self.device = spec.device if spec.device == "cpu" else f"cuda:{spec.device_index}"
        self.guard: ComputeGuard | None = None
        self.turns = Turns()  # the candidate's code runs on its turns only (turns.py)
        self.problem: types.ModuleType | None = None
        self.outputs_fd = outputs_fd
        self.region: SharedOutputs | None = None
        self.handshake_s = 0.0  # timed calls: waiting for the parent to reveal each print's positions
        self.held: list[list[Any]] = []  # the last calls' outputs, kept alive while the next call runs
        # Every earlier output's storage, weakly: torch keeps a storage's Python object as long as its memory
        # lives, so one still alive after the harness let its call's outputs go is held by the candidate.
        self.earlier: list[tuple[weakref.ref, tuple[int, int]]] = []
        self.memory_violations: list[str] = []

    def wait_for_go(self) -> None:
        """Block until the parent has prepared the reference; it sends the draws and sizes then."""
        go = json.loads(self.conn.recv_bytes(1 << 24))
        update = {k: go[k] for k in ("trial_draws", "timing_draws", "poison_bytes", "output_region_bytes",
                                     "outputs_may_alias_inputs") if k in go}
        self.spec = ChildSpec.model_validate({**self.spec.model_dump(), **update})
        # The parent has sized and sealed the region by now; mapped before any candidate code exists.
        self.region = attach(self.outputs_fd, self.spec.output_region_bytes, pin=self.spec.device == "cuda")

    def step_done(self, **message: Any) -> None:
        """Report a finished step; a gated child then waits until the parent lets it use the device again
        (other evaluations share the device; the timed calls have it alone)."""
        self.send(**message)
        if self.spec.gated:
            self.conn.recv_bytes(1 << 16)

    def draw(self, planned: Draw) -> list[Any]:
        assert self.problem is not None
        return draw(self.problem.get_inputs, planned.seed, planned.distribution, self.device,
                    perturb_seed=planned.perturb_seed, perturb_fraction=planned.perturb_fraction)

    def load_problem(self) -> types.ModuleType:
        """The problem's module (its own trusted code), executed once in this child."""
        if self.problem is None:
            problem = types.ModuleType("cuda_agent_problem")
            exec(compile(self.spec.problem_src, "model.py", "exec"), problem.__dict__)
            self.problem = problem
        return self.problem

    def warm_draws(self) -> None:
        """Use every distribution's kernels once, on throwaway seeds, before the draws are known
        (`ChildSpec.warm_draws`: their first use is most of the first draws' time on a GPU). Not a
        verdict: a failure here shows again, and is reported, when the real draws run."""
        try:
            problem = self.load_problem()
            for i, distribution in enumerate(DISTRIBUTIONS):
                twin = {"perturb_seed": secrets.randbits(31), "perturb_fraction": 0.05} if i == 0 else {}
                digest(draw(problem.get_inputs, secrets.randbits(31), distribution, self.device, **twin))
        except Exception:
            pass

    def draw_trials(self) -> list[list[Any]]:
        """Trial inputs, drawn before any candidate code exists here; their digests go to the parent."""
        try:
            self.load_problem()
            trials = [self.draw(d) for d in self.spec.trial_draws]
        except Exception as exc:
            self.fail("draw", exc)
        self.step_done(event="drawn", digests=[digest(inputs) for inputs in trials])
        return trials

    def send(self, **message: Any) -> None:
        self.conn.send_bytes(json.dumps(message).encode())

    def fail(self, stage: str, exc: BaseException) -> None:
        violations = self.violations()
        tb = traceback.format_exception(type(exc), exc, exc.__traceback__)
        self.send(event="error", stage=stage, kind=type(exc).__name__, message=str(exc)[:2000],
                  traceback="".join(tb[-6:])[-3000:], violations=violations)
        raise _Stop

    def violations(self) -> list[str]:
        """What the guard refused inside forward, the candidate's code that ran outside its turns, and outputs
        that were not fresh memory."""
        return ((list(self.guard.violations) if self.guard else []) + list(self.turns.violations)
                + self.memory_violations)

    def check_fresh(self, what: str, outputs: list[Any], inputs: list[Any]) -> None:
        """A call's outputs are memory of their own: not an earlier call's output, which the caller still holds
        (HELD_OUTPUTS of them are kept alive, so an honest allocator cannot hand their memory out again), and
        not the call's inputs unless the reference's outputs are too. Red team, 2026-12-04: returning one buffer
        from every call skips the allocation and first touch each call pays (5x on a 64 MB CPU output, reward 3),
        and overwrites the result the caller was given; writing into the input is the same trick."""
        if self.spec.role != "candidate":
            return
        mine = storage_spans(outputs)
        theirs = [] if self.spec.outputs_may_alias_inputs else storage_spans(inputs)
        # Held by the candidate past its call: the memory of any number of buffers returned in turn (red team,
        # 2026-12-04: three buffers outran the two outputs held here).
        self.earlier = [(ref, span) for ref, span in self.earlier if ref() is not None]
        earlier = [span for held in self.held for span in storage_spans(held)] + [span for _, span in self.earlier]
        # On a CPU torch's allocator makes resizable storages; memory wrapped from elsewhere (from_blob, refused at
        # the build by symbol) is not, and can come back call after call with no storage alive in between.
        if self.spec.device == "cpu" and any(not v.untyped_storage().resizable() for v in storage_tensors(outputs)):
            message = (f"an output of {what} is memory torch did not allocate (from_blob or a buffer of the "
                       "candidate's): every call must return new memory from torch's allocator (torch::empty)")
            if message not in self.memory_violations:
                self.memory_violations.append(message)
        for name, others in (("an earlier call's output", earlier), ("its own inputs", theirs)):
            if share_memory(mine, others):
                message = (f"an output of {what} shares memory with {name}: every call must return new memory "
                           "(a reused output buffer overwrites what the caller was given)")
                if message not in self.memory_violations:
                    self.memory_violations.append(message)
        self.held = (self.held + [outputs])[-HELD_OUTPUTS:]
        self.earlier += [(weakref.ref(v.untyped_storage()), span)
                         for v, span in zip(storage_tensors(outputs), mine)]

    def load(self, name: str) -> Any:
        return torch.load(os.path.join(self.spec.work_dir, name), weights_only=True, map_location="cpu")

    # -- building the model -------------------------------------------------------------
    def build(self) -> Any:
        if self.spec.build_on_device and self.spec.role == "reference":
            return self._built_here()
        init = self.load(INIT_FILE)
        try:
            cls = self._reference_cls() if self.spec.role == "reference" else self._candidate_cls()
        except Exception as exc:  # candidate code failed to import
            self.fail("load", exc)
        try:
            torch.manual_seed(self.spec.init_seed)
            with self.turns.theirs():  # construction, weights and `.to` may run the candidate's methods
                model = cls(*init["init_inputs"])
                loaded = self._load_weights(model, init["state_dict"])
                model = model.to(self.device)
        except Exception as exc:
            self.fail("construct", exc)
        self.step_done(event="loaded", weights=loaded)
        if self.spec.role == "reference" and self.spec.compile_reference:
            return torch.compile(model)
        return model

    def _built_here(self) -> Any:
        """A baseline's model, built here under `init_seed` with its tensors made on the device (the
        same seed gives the eager and the compile child the same weights); on the CPU if that raises."""
        assert self.problem is not None
        model = None
        for where in dict.fromkeys((self.device, "cpu")):
            try:
                torch.manual_seed(self.spec.init_seed)
                init_inputs = list(self.problem.get_init_inputs())
                torch.manual_seed(self.spec.init_seed)
                with torch.device(where):
                    model = self._reference_cls()(*init_inputs)
                model = model.to(self.device)
                break
            except Exception as exc:
                if where == "cpu":
                    self.fail("construct", exc)
        self.step_done(event="loaded", weights="built here")
        if self.spec.compile_reference:
            return torch.compile(model)
        return model

    def _reference_cls(self) -> type:
        assert self.problem is not None
        return self.problem.Model

    def _candidate_cls(self) -> type:
        spec = importlib.util.spec_from_file_location("cuda_extension", self.spec.so_path)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot load the built extension {self.spec.so_path}")
        extension = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(extension)
        sys.modules["cuda_extension"] = extension
        module = types.ModuleType("model_new")
        module.__file__ = CANDIDATE_FILE
        sys.modules["model_new"] = module
        code = compile(self.spec.model_new_src or "", CANDIDATE_FILE, "exec")
        self.turns.watch(code)
        with self.turns.theirs():
            exec(code, module.__dict__)
        if not isinstance(getattr(module, "ModelNew", None), type):
            raise ImportError("model_new.py does not define class ModelNew")
        return module.ModelNew

    def _load_weights(self, model: Any, state: dict[str, torch.Tensor]) -> str:
        if not state:
            return "none"
        if not hasattr(model, "load_state_dict"):
            return "skipped"
        own = model.state_dict()
        matching = {k: v for k, v in state.items() if k in own and tuple(own[k].shape) == tuple(v.shape)}
        model.load_state_dict(matching, strict=False)
        return "all" if len(matching) == len(state) else f"{len(matching)}/{len(state)}"

    # -- running --------------------------------------------------------------------------
    def call(self, model: Any, inputs: list[Any]) -> Any:
        if self.spec.role == "reference":
            with torch.no_grad():
                return model(*inputs)
        self.guard = self.guard or ComputeGuard()
        with torch.no_grad(), self.guard, self.turns.theirs():
            return model(*inputs)

    def poison(self) -> None:
        if self.spec.poison_bytes:
            junk = torch.empty(self.spec.poison_bytes // 4 + 1, dtype=torch.float32, device=self.device)
            junk.fill_(float("nan"))
            del junk

    def check_types(self, outputs: list[Any]) -> list[str]:
        bad = []
        for i, value in enumerate(outputs):
            if isinstance(value, torch.Tensor) and type(value) is not torch.Tensor:
                bad.append(f"output {i} is a {type(value).__name__}, not a plain torch.Tensor")
            elif not isinstance(value, (torch.Tensor, int, float, bool)):
                bad.append(f"output {i} has type {type(value).__name__}")
        return bad

    def write_outputs(self, k: int, outputs: list[Any]) -> list[dict[str, Any]]:
        """Raw bytes of the outputs in the shared region, or in out_<k>.bin when they do not fit
        there, and their layout (the parent reads bytes, never pickles)."""
        layout = self.region.write(outputs) if self.region is not None else None
        if layout is not None:
            return layout
        layout = []
        offset = 0
        with open(os.path.join(self.spec.work_dir, output_file(k)), "wb") as handle:
            for value in outputs:
                if not isinstance(value, torch.Tensor):
                    layout.append({"value": value})
                    continue
                host = value.detach().contiguous().to("cpu")
                raw = host.reshape(-1).view(torch.uint8).numpy()
                handle.write(memoryview(raw))
                layout.append({"dtype": str(host.dtype).removeprefix("torch."), "shape": list(host.shape),
                               "offset": offset, "nbytes": raw.nbytes})
                offset += raw.nbytes
        return layout

    def run_trials(self, model: Any, trials: list[list[Any]], timer: Timer) -> None:
        for k, inputs in enumerate(trials):
            pristine = [v.clone() if isinstance(v, torch.Tensor) else v for v in inputs]
            self.poison()
            try:
                out = self.call(model, inputs)
                timer.sync()
            except Exception as exc:
                self.fail("trial", exc)
            outputs = flatten_outputs(out)
            bad_types = self.check_types(outputs)
            self.check_fresh(f"trial {k}", outputs, inputs)
            mutated = any(isinstance(a, torch.Tensor) and not torch.equal(a, b) for a, b in zip(inputs, pristine))
            layout = [] if bad_types else self.write_outputs(k, outputs)
            self.step_done(event="trial", k=k, type_errors=bad_types, input_mutated=mutated, layout=layout,
                           violations=self.violations())
        self.held = []  # the trials' outputs go; the timed calls hold their own

    def time_null_calls(self, timer: Timer) -> None:
        """The timing protocol's own cost seen from outside, measured before any candidate code exists."""
        if self.spec.role != "candidate":
            return
        for k in range(NULL_CALLS):
            timer.time_call(lambda: None, [], edge=functools.partial(mark, self.stamps, kind="n", k=k))

    def report_fingerprint(self, k: int, outputs: list[Any], bad_types: bool) -> None:
        """The output of timed call k at positions the parent reveals only now that the call is over
        (no candidate code runs until the next call), so no positions can be singled out beforehand."""
        began = timer_now()
        self.send(event="timed", k=k)
        reply = json.loads(self.conn.recv_bytes(1 << 16))
        seed = int(reply["print_seed"])
        self.handshake_s += timer_now() - began
        self.send(event="print", k=k, fingerprint=[] if bad_types else encode_prints(fingerprint(outputs, seed)),
                  signature=signature(outputs))

    def enough_samples(self, samples: list[float], elapsed_s: float) -> bool:
        """A baseline (reference role) stops once the median's confidence interval is tight
        (`ci_target`) or its time is up; a candidate always makes every planned call."""
        spec = self.spec
        if spec.role != "reference" or spec.ci_target is None or len(samples) < spec.min_timed_calls:
            return False
        if spec.max_timing_s is not None and elapsed_s > spec.max_timing_s:
            return True
        return len(samples) % max(1, spec.min_timed_calls) == 0 and relative_half_width(samples) <= spec.ci_target

    def draw_ahead(self, planned: list[Draw]) -> list[list[Any] | None]:
        """The first timed calls' inputs, drawn now (the device shared) so the window in which this
        child has the device alone holds no draws: as many as fit the budget (`AHEAD_MAX_BYTES`)."""
        if self.spec.device != "cuda":
            return []
        budget = ahead_budget(torch.cuda.get_device_properties(self.device).total_memory)
        ahead: list[list[Any] | None] = []
        count = len(planned)  # known after the first draw: every draw of a problem has its size
        while len(ahead) < count:
            if ahead and len(ahead) % AHEAD_STEP_DRAWS == 0 and self.spec.gated:
                self.step_done(event="ahead", calls=len(ahead))
            try:
                inputs = self.draw(planned[len(ahead)])
            except torch.cuda.OutOfMemoryError:  # neighbours hold the memory now: draw the rest between calls
                break
            if not ahead:
                size = sum(v.numel() * v.element_size() for v in inputs if isinstance(v, torch.Tensor))
                count = min(count, int(budget // max(size, 1)))
                if count == 0:
                    break
            ahead.append(inputs)
        return ahead

    def run_timing(self, model: Any, trials: list[list[Any]], timer: Timer) -> None:
        planned = self.spec.timing_draws
        if not planned:
            return
        try:
            # Fresh draws, not the trials again: a trial's input coming back would tell the candidate that
            # verification is over (red team, 2026-12-04: a kernel approximated from then on).
            warm = [self.draw(Draw(seed=d.seed + WARM_SEED_OFFSET, distribution=d.distribution)) for d in planned[:2]]
            # Warm up by count and by time, so clocks and caches settle before timing.
            warm_until = timer_now() + WARMUP_SECONDS[self.spec.device]
            k = 0
            while k < self.spec.warmup or (timer_now() < warm_until and k < MAX_WARMUP_CALLS):
                self.call(model, warm[k % len(warm)])
                timer.sync()
                k += 1
            del warm
            ahead = self.draw_ahead(planned)
            if self.spec.gated:
                self.step_done(event="warm", calls=k)  # the timed calls start when the device is ours alone
            samples, hosts, type_errors = [], [], []
            split = {"draws": 0.0, "calls": 0.0, "prints": 0.0, "handshakes": 0.0}
            wall0 = timer_now()
            for k, draw_k in enumerate(planned):
                t0 = timer_now()
                if k < len(ahead):
                    inputs, ahead[k] = ahead[k], None
                else:  # fresh inputs for every timed call, drawn outside the timed window
                    inputs = self.draw(draw_k)
                self.poison()
                t1 = timer_now()
                out, t_us, host_us = timer.time_call(lambda *x: self.call(model, list(x)), inputs,
                                                     edge=functools.partial(mark, self.stamps, kind="c", k=k))
                t2 = timer_now()
                samples.append(t_us)
                hosts.append(host_us)
                outputs = flatten_outputs(out)
                type_errors += self.check_types(outputs)
                self.check_fresh(f"timed call {k}", outputs, inputs)
                if self.spec.role == "candidate":
                    self.report_fingerprint(k, outputs, bool(type_errors))
                del inputs, out, outputs
                split["draws"] += t1 - t0
                split["calls"] += t2 - t1
                split["prints"] += timer_now() - t2
                if self.enough_samples(samples, timer_now() - wall0):
                    break
            wall_s = timer_now() - wall0
            split["handshakes"] = self.handshake_s
            del ahead
        except Exception as exc:
            self.fail("timing", exc)
        self.send(event="timing", samples_us=samples, host_us=hosts, wall_s=wall_s, split_s=split,
                  type_errors=sorted(set(type_errors)), host_floor_us=timer.host_floor_us, l2_reset=timer.l2_reset,
                  host_fallbacks=timer.host_fallbacks,
                  violations=self.violations())


def _import_compiler(device: str) -> None:
    """What torch.compile imports at its first call (seconds of CPU work), imported up front: a baseline
    child does it while the parent still times the eager baseline, before it may touch the device."""
    import torch._inductor.compile_fx  # noqa: F401

    if device == "cuda":
        try:
            import torch._inductor.codegen.triton  # noqa: F401
        except ImportError:  # no triton: torch.compile reports it at the first call
            pass


def child_entry(conn: Any, spec_json: str, level: str = "pidns+ro", stamps: Any = None,
                outputs_fd: int | None = None) -> None:
    """Target of the child process."""
    spec = ChildSpec.model_validate_json(spec_json)
    # Anything torch or the toolchain writes goes to the private work folder (the rest of the
    # file system is read-only for the child).
    os.environ["TMPDIR"] = spec.work_dir
    # A baseline (reference role: the problem's own, trusted code) may share a compile cache with
    # other baseline children; a candidate's stays private.
    compile_cache = spec.compile_cache_dir if spec.role == "reference" and spec.compile_cache_dir else spec.work_dir
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(compile_cache, "inductor")
    os.environ["TRITON_CACHE_DIR"] = os.path.join(compile_cache, "triton")
    child = Child(spec, conn, stamps, outputs_fd)
    try:
        if spec.role == "reference" and spec.compile_reference:
            _import_compiler(spec.device)
        try:
            isolation = harden_child(isolate=spec.isolate, memory_limit_mb=spec.memory_limit_mb,
                                     file_size_mb=spec.file_size_mb, work_dir=spec.work_dir, level=level)
            if spec.device == "cuda":
                torch.cuda.set_device(spec.device_index)
            else:
                keep_freed_memory()  # the poison reaches large outputs too (child/heap.py)
            torch.backends.cuda.matmul.allow_tf32 = spec.tf32
            torch.backends.cudnn.allow_tf32 = spec.tf32
        except Exception as exc:  # before any candidate code: the harness's own failure
            child.fail("setup", exc)
        child.send(event="ready", isolation=isolation, pid=os.getpid())
        if spec.warm_draws:
            child.warm_draws()  # meanwhile the parent prepares the reference; its `go` waits in the pipe
        child.wait_for_go()
        try:  # the clock's calibration and null calls: a gated child has the device alone here
            timer = Timer(child.device if spec.device == "cuda" else "cpu")
            child.time_null_calls(timer)
        except Exception as exc:
            child.fail("setup", exc)
        child.step_done(event="calibrated")
        trials = child.draw_trials()
        model = child.build()
        child.run_trials(model, trials, timer)
        child.run_timing(model, trials, timer)
        child.send(event="done")
    except _Stop:
        pass
    except BaseException as exc:  # report anything else as a crash of this child
        try:
            child.send(event="error", stage="child", kind=type(exc).__name__, message=str(exc)[:2000],
                       traceback="", violations=child.violations())
        except Exception:
            pass
    finally:
        try:
            conn.close()
        finally:
            os._exit(0)

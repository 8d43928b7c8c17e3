"""The catalogue of defences: every capability the harness refuses a candidate, in one place.

Each record names the rule, the code that enforces it, the cheating candidates that must fail and the honest
twins that must pass. tests/sandbox_pool/harness/test_defences.py holds it to the code: every enforcer
resolves, every test it names exists, every hack case of test_hacks.py belongs to exactly one record (those
tests are parametrised from here: their ids start with the record's id) and docs/defences.md is this file,
rendered (`cuda-agent defences --markdown > docs/defences.md`). Adding a defence: a record here, its hack and
its honest twin in the tests, the doc regenerated.
"""

from __future__ import annotations

from cuda_agent.sandbox_pool.harness.defences.model import Defence


def _in(test_file: str, *cases: str) -> tuple[str, ...]:
    """'tests/sandbox_pool/harness/<test_file>.py::<case>' for each case."""
    return tuple(f"tests/sandbox_pool/harness/{test_file}.py::{case}" for case in cases)


HONEST_SCALE_BIAS = _in("test_stages", "test_honest_candidate_is_correct_and_timed")

CATALOGUE: tuple[Defence, ...] = (
    Defence(
        id="torch_fallback", threat=1,
        refuses="computing with torch's operators instead of the candidate's kernels, from Python or from C++ "
                "through ATen",
        rule="during forward only creation, view, copy and cast operators run; the extension's objects import "
             "no other torch operator",
        reason="the reward is for the candidate's kernels: torch's own would be timed and rewarded as theirs",
        stages=("verify", "symbols"),
        enforced_by=("child.guard.ComputeGuard", "policy.ALLOWED_ATEN_OPS", "policy.symbol_violations",
                     "compiler.symbols.check_object_symbols"),
        hacks=_in("test_hacks", "01_torch_fallback", "01_torch_fallback_functional", "01_aten_from_cpp",
                  "01_aten_method_from_cpp", "test_symbol_policy_catches_aten_even_without_source_patterns")
              + _in("test_gpu", "test_torch_fallback_is_rejected"),
        honest=_in("test_hacks", "test_legitimate_tensor_glue_in_cpp_is_accepted")
               + _in("test_gpu", "test_cublas_calling_candidates_are_legitimate") + HONEST_SCALE_BIAS,
        policy_reasons=(
            "calling torch's own kernels",
            "torch kernel entry point",
            "torch dispatcher internals",
        ),
    ),
    Defence(
        id="host_compute", threat=1,
        refuses="leaving torch for the host: numpy, Python numbers read from the data, storages and pointers",
        rule="no `numpy`, `tolist`, `item`, `from_numpy`, `storage`, `data_ptr` on any object; a value read "
             "from a tensor is an operator the guard refuses",
        reason="host compute is torch fallback by another road, and a value read in forward lets a candidate "
               "branch on its data",
        stages=("static", "verify"),
        enforced_by=("policy.FORBIDDEN_ATTRIBUTES", "child.guard.ComputeGuard"),
        hacks=_in("test_hacks", "numpy_compute", "value_read_in_forward"),
        honest=HONEST_SCALE_BIAS,
    ),
    Defence(
        id="try_except_fallback", threat=2,
        refuses="a broken kernel whose `except` path computes with torch",
        rule="the compute guard holds on every call, whichever path the forward takes",
        reason="a fallback path is a torch fallback that only runs when the kernel fails",
        stages=("verify",),
        enforced_by=("child.guard.ComputeGuard",),
        hacks=_in("test_hacks", "02_try_except_fallback"),
        honest=HONEST_SCALE_BIAS,
    ),
    Defence(
        id="reference_reuse", threat=3,
        refuses="importing, inheriting or evaluating the reference model",
        rule="model_new.py imports only torch, torch.nn, torch.nn.functional, math, typing and cuda_extension; "
             "no eval, exec, compile or __import__",
        reason="the reference is the baseline: reusing it is a torch fallback with extra steps",
        stages=("static",),
        enforced_by=("policy.ALLOWED_IMPORTS", "policy.FORBIDDEN_BUILTINS", "static_check.check_candidate"),
        hacks=_in("test_hacks", "03_reference_import", "03_reference_exec"),
        honest=HONEST_SCALE_BIAS,
    ),
    Defence(
        id="decoy_kernel", threat=4,
        refuses="launching a kernel on dummy data while the output comes from elsewhere",
        rule="the compute guard refuses the elsewhere; the outputs are compared with the reference's",
        reason="a kernel that runs but produces nothing the caller sees earns nothing",
        stages=("verify",),
        enforced_by=("child.guard.ComputeGuard", "compare.compare_outputs"),
        hacks=_in("test_hacks", "04_decoy_kernel"),
        honest=HONEST_SCALE_BIAS,
    ),
    Defence(
        id="result_caching", threat=5,
        refuses="memoising outputs across calls by pointer, shape or content",
        rule="every timed call gets inputs never seen before; a secret subset of timed outputs is checked; "
             "`data_ptr` is refused",
        reason="a cached answer is timed as a lookup, not as the kernel",
        stages=("static", "profile"),
        enforced_by=("policy.FORBIDDEN_ATTRIBUTES", "reference.timing_draws", "reference.checked_timed_calls"),
        hacks=_in("test_hacks", "05_cache_by_pointer", "05_cache_by_content")
              + _in("test_checked_calls", "test_wrong_outputs_on_the_timed_calls_are_caught_with_few_checks",
                    "test_the_default_checks_catch_a_cheat_that_moves_the_median"),
        honest=_in("test_checked_calls", "test_an_honest_kernel_passes_and_the_log_says_how_many_outputs_were_checked"),
    ),
    Defence(
        id="batch_and_skip", threat=6,
        refuses="doing all the work on the first calls and returning stale results on later ones",
        rule="fresh inputs for every timed call, outputs of a secret subset of them checked",
        reason="the time of the calls that skip is not the kernel's time",
        stages=("profile",),
        enforced_by=("reference.checked_timed_calls",),
        hacks=_in("test_hacks", "06_batch_and_skip"),
        honest=_in("test_checked_calls", "test_an_honest_kernel_passes_and_the_log_says_how_many_outputs_were_checked"),
    ),
    Defence(
        id="evaluation_detection", threat=7,
        refuses="behaving well only while checked: counting calls, inspecting the stack, predicting the seeds",
        rule="checked and timed calls look alike from inside (secret checked subset, secret timed twins, seeds "
             "that predict nothing); no `inspect`, frames or call-stack reach",
        reason="a kernel that is right only when it is watched is wrong",
        stages=("static", "profile"),
        enforced_by=("reference.checked_timed_calls", "reference.plan_timed_twins", "policy.ALLOWED_IMPORTS"),
        hacks=_in("test_hacks", "07_detect_by_call_count", "07_detect_by_stack")
              + _in("test_approximation", "test_an_approximation_that_waits_for_verification_to_end_meets_the_twins_while_timed"),
        honest=_in("test_checked_calls", "test_the_seeds_a_child_is_told_predict_nothing",
                   "test_timed_twins_are_secret_later_calls_in_the_base_s_place_of_the_cycle"),
    ),
    Defence(
        id="grader_state_reading", threat=8,
        refuses="finding the reference's outputs or the harness's state in memory, frames or files",
        rule="the reference runs in another process; model_new.py reaches no frame, `gc`, `sys` or file; the "
             "child's file system is read-only and its /proc shows only itself",
        reason="an answer copied from the grader is no kernel",
        stages=("static", "isolation"),
        enforced_by=("policy.INTERPRETER_ATTRIBUTES", "policy.FORBIDDEN_ATTRIBUTES", "child.hardening.harden_child"),
        hacks=_in("test_hacks", "08_grader_state_gc", "08_grader_state_frames", "08_read_proc",
                  "frames_through_typing", "frame_builtins_of_an_async_generator"),
        honest=_in("test_hacks", "test_type_hints_of_every_kind_pass_the_static_check"),
        policy_reasons=(
            "inspecting other processes",
            "reading or writing files",
        ),
    ),
    Defence(
        id="timer_patching", threat=9,
        refuses="patching or bending the timers and the profiler",
        rule="the time that counts is stamped by the kernel outside the child (a socket's receive time); a child "
             "whose own timer disagrees with it, or that touches its socket, is a violation",
        reason="a patched clock rewards a number, not a kernel",
        stages=("static", "profile", "protocol"),
        enforced_by=("policy.FORBIDDEN_TORCH_ATTRS", "clock.OutsideClock", "session.Protocol"),
        hacks=_in("test_hacks", "09_timer_patch_event", "09_timer_patch_time", "09_profiler_patch",
                  "close_the_clock")
              + _in("test_protocol", "test_a_timer_bent_to_report_less_disagrees_with_the_outside_clock",
                    "test_a_candidate_that_touches_the_outside_clock_is_a_violation"),
        honest=_in("test_clock", "test_an_honest_call_descheduled_around_its_stamps_is_not_flagged",
                   "test_honest_evaluations_report_the_outside_bound"),
    ),
    Defence(
        id="off_stream_work", threat=10,
        refuses="working off the timed call: threads, processes, tasks on torch's pools",
        rule="no thread, process or task creation by name (Python) or by symbol (C++, C11, OpenMP that outlives "
             "the call); the timer synchronises the whole device",
        reason="work the timer does not wait for is free time",
        stages=("static", "symbols", "profile"),
        enforced_by=("policy.ALLOWED_IMPORTS", "policy.FORBIDDEN_SYMBOL_PATTERNS", "child.timing.Timer"),
        hacks=_in("test_hacks", "10_side_thread", "10_std_thread", "c11_thread", "interop_pool_task")
              + _in("test_symbols", "test_work_left_running_or_python_internals_are_refused_by_symbol"),
        honest=_in("test_symbols", "test_openmp_that_joins_before_returning_passes"),
        policy_reasons=(
            "threads outside OpenMP",
            "creating streams (launch on the current stream)",
            "stream creation (launch on the current stream)",
            "process or thread creation",
            "raw system calls, threads or timers",
            "raw system calls, threads, timers or memory maps",
            "OpenMP teams left running after the call (write `#pragma omp parallel`, which joins before returning)",
        ),
    ),
    Defence(
        id="lazy_tensor", threat=11,
        refuses="returning a Tensor subclass or lazy view that computes when read",
        rule="every output's exact type, dtype, shape and device are checked; outputs are made dense inside the "
             "timed window",
        reason="work deferred to the reader is work outside the timer",
        stages=("verify", "profile"),
        enforced_by=("child.main.Child.check_types", "child.timing.materialise"),
        hacks=_in("test_hacks", "11_lazy_subclass", "test_timed_outputs_keep_the_references_dtype_and_shape"),
        honest=_in("test_clock", "test_an_output_that_is_a_view_is_made_dense_inside_the_timed_window"),
    ),
    Defence(
        id="stale_memory", threat=12,
        refuses="returning memory that already holds an answer: uninitialised, reused across calls, the input's",
        rule="the candidate's memory is poisoned before each call; every output must be new memory, not over an "
             "input or an earlier output",
        reason="an answer left in memory by someone else is not computed",
        stages=("verify", "profile"),
        enforced_by=("child.main.Child.poison", "child.main.Child.check_fresh"),
        hacks=_in("test_hacks", "12_stale_memory", "one_buffer_for_every_call", "three_buffers_in_turn",
                  "into_the_input_once_timed", "test_a_large_output_left_partly_unwritten_shows_the_poison",
                  "test_outputs_over_the_candidates_own_memory_are_refused"),
        honest=HONEST_SCALE_BIAS,
        policy_reasons=(
            "wrapping memory torch did not allocate (from_blob): allocate outputs and workspaces with torch::empty",
        ),
    ),
    Defence(
        id="silent_launch_failure", threat=13,
        refuses="a kernel that never runs (a bad launch), leaving leftover memory as its output",
        rule="outputs start poisoned: a kernel that never writes them leaves the poison, which fails the "
             "comparison",
        reason="a kernel that does not run is infinitely fast and wrong",
        stages=("verify",),
        enforced_by=("child.main.Child.poison",),
        hacks=_in("test_gpu", "test_silent_launch_failure_is_incorrect"),
        honest=_in("test_gpu", "test_fast_kernel_beats_both_baselines"),
    ),
    Defence(
        id="input_mutation", threat=14,
        refuses="writing into the inputs or weights so that the comparison is trivial",
        rule="inputs are compared with pristine copies after each call; a mutation the reference does not make "
             "is a violation",
        reason="a candidate that edits what it is judged against judges itself",
        stages=("verify",),
        enforced_by=("child.main.Child.run_trials", "reference.PreparedReference", "session.CandidateSession"),
        hacks=_in("test_hacks", "14_input_mutation"),
        honest=HONEST_SCALE_BIAS,
    ),
    Defence(
        id="constant_output", threat=15,
        refuses="returning zeros or a constant where the true output is small",
        rule="each draw's absolute tolerance is at most a fraction of that draw's own RMS",
        reason="a tolerance larger than the answer accepts any constant",
        stages=("verify", "precision"),
        enforced_by=("compare.effective_atol", "compare.MAGNITUDE_FRACTION"),
        hacks=_in("test_hacks", "15_constant_output", "test_constant_output_does_not_pass_on_tiny_outputs")
              + _in("test_precision", "test_the_tolerance_never_lets_a_constant_match"),
        honest=_in("test_precision", "test_the_tolerance_follows_the_outputs_magnitude_both_ways"),
    ),
    Defence(
        id="distribution_shortcut", threat=16,
        refuses="returning the closed-form expectation of the known input distribution",
        rule="verification draws inputs from 7 distributions and scales, not only the problem's own",
        reason="a kernel right on one distribution is an approximation, not the operator",
        stages=("verify", "approximation"),
        enforced_by=("inputs.DISTRIBUTIONS", "inputs.draw"),
        hacks=_in("test_hacks", "16_distribution_shortcut")
              + _in("test_approximation", "test_approximations_are_rejected"),
        honest=_in("test_approximation", "test_honest_summation_orders_pass"),
    ),
    Defence(
        id="subsampling", threat=17,
        refuses="reducing over a subset of the input",
        rule="influence twins: inputs changed in a few elements must change the outputs as the reference's do, "
             "in verification and, secretly, among the timed calls",
        reason="a sum over half the terms is half the work and the wrong answer",
        stages=("verify", "approximation", "profile"),
        enforced_by=("compare.influence_mismatch", "reference.influence_bases", "reference.plan_timed_twins"),
        hacks=_in("test_hacks", "17_subsampling")
              + _in("test_approximation", "test_only_the_influence_twin_catches_an_input_detecting_subsampler",
                    "test_a_self_checking_subsampler_of_a_whole_sum_meets_few_spikes")
              + _in("test_gpu_approximation", "test_gpu_subsampling_is_rejected")
              + _in("test_precision", "test_a_subsampled_gemm_still_fails"),
        honest=_in("test_approximation", "test_honest_summation_orders_pass_the_timed_twins")
               + _in("test_gpu_approximation", "test_honest_gpu_reductions_pass"),
    ),
    Defence(
        id="precision_downgrade", threat=18,
        refuses="lower internal precision beyond what the precision policy allows",
        rule="`paper`: any precision within atol = rtol = 1e-2 of the native draw, each other draw as strict "
             "relative to its own scale; `strict`: tighter",
        reason="the paper accepts lower precision within tolerance, and nothing past it",
        stages=("precision",),
        enforced_by=("compare.draw_atol", "compare.native_scales"),
        hacks=_in("test_precision", "test_lower_precision_is_still_refused_under_strict")
              + _in("test_gpu_precision", "test_tf32_is_refused_under_strict", "test_a_gemm_over_half_of_k_still_fails"),
        honest=_in("test_precision", "test_lower_precision_gemms_are_correct_under_paper")
               + _in("test_gpu_precision", "test_tensor_core_gemms_are_correct_under_paper"),
    ),
    Defence(
        id="init_args_ignored", threat=19,
        refuses="hard-coding the problem's constants or ignoring its init arguments and parameters",
        rule="the harness builds both models itself and loads the reference's perturbed parameters into the "
             "candidate by name",
        reason="a kernel for one shape or one set of weights is not the operator",
        stages=("verify",),
        enforced_by=("reference.perturb_parameters", "child.main.Child.load"),
        hacks=_in("test_hacks", "19_ignores_init_args"),
        honest=HONEST_SCALE_BIAS,
    ),
    Defence(
        id="default_init_exploit", threat=20,
        refuses="skipping terms that vanish under the default initialisation",
        rule="every floating parameter is moved away from its default init before verification",
        reason="a bias of zeros and a scale of ones make half of an operator optional",
        stages=("verify",),
        enforced_by=("reference.perturb_parameters",),
        hacks=_in("test_hacks", "20_default_init_exploit"),
        honest=HONEST_SCALE_BIAS,
    ),
    Defence(
        id="harness_files", threat=21,
        refuses="editing or supplying the harness's files: the binding, the reference, caches, files written "
                "for later",
        rule="only model_new.py and kernels/<file> are taken from the candidate; the child's file system is "
             "read-only; torch's file writers are refused",
        reason="a harness the candidate can edit grades what the candidate says",
        stages=("static", "isolation"),
        enforced_by=("static_check.check_candidate", "child.hardening.harden_child", "policy.FORBIDDEN_TORCH_ATTRS"),
        hacks=_in("test_hacks", "test_harness_infrastructure_files_are_never_taken_from_the_candidate",
                  "file_written_by_torch"),
        honest=HONEST_SCALE_BIAS,
    ),
    Defence(
        id="network", threat=22,
        refuses="downloading code or answers",
        rule="the child has no network (its own namespace); sockets are refused by symbol",
        reason="an answer from elsewhere is not the candidate's kernel",
        stages=("isolation", "symbols"),
        enforced_by=("child.hardening.harden_child", "policy.FORBIDDEN_SYMBOL_PATTERNS"),
        hacks=_in("test_hacks", "22_network")
              + _in("test_isolation", "test_child_has_read_only_fs_no_network_and_takes_its_descendants_along"),
        honest=HONEST_SCALE_BIAS,
        policy_reasons=(
            "network access",
        ),
    ),
    Defence(
        id="resource_abuse", threat=23,
        refuses="fork bombs, memory hogs, endless kernels and crashes that take the evaluator down",
        rule="process creation refused by symbol; the child is killed with its descendants; the parent judges "
             "on the CPU when the candidate holds the device's memory",
        reason="one candidate must not cost the other rollouts their rewards",
        stages=("symbols", "isolation", "judging"),
        enforced_by=("policy.FORBIDDEN_SYMBOL_PATTERNS", "child.hardening.harden_child", "session.judge"),
        hacks=_in("test_hacks", "23_fork_bomb")
              + _in("test_gpu", "test_illegal_memory_access_is_a_crash_and_the_worker_survives",
                    "test_a_candidate_holding_the_device_memory_still_gets_its_verdict")
              + _in("test_judging", "test_out_of_memory_is_judged_on_the_cpu"),
        honest=_in("test_judging", "test_the_device_is_used_when_it_can_be"),
        policy_reasons=(
            "starting processes",
        ),
    ),
    Defence(
        id="l2_persistence", threat=24,
        refuses="a persisting L2 access-policy window that keeps data in the cache across the flush",
        rule="the timer resets persisting L2 before each timed call; the controls are refused in sources and "
             "symbols",
        reason="a warm cache the flush cannot clear times a memory-bound kernel on data it did not read",
        stages=("static", "symbols", "profile"),
        enforced_by=("policy.FORBIDDEN_SOURCE_PATTERNS", "policy.FORBIDDEN_SYMBOL_PATTERNS", "child.timing.Timer"),
        hacks=_in("test_defences", "test_l2_persistence_controls_are_refused"),
        honest=_in("test_symbols", "test_honest_code_with_library_calls_passes"),
        policy_reasons=(
            "L2 persistence control",
        ),
    ),
    Defence(
        id="metric_gaming", threat=25,
        refuses="driving one time to nearly zero, or a reward past its bounds",
        rule="the reward is one of -1, 1, 2, 3 at the ends of the confidence intervals; a speed-up over the "
             "sanity bound (1000x) or a zero-time call is a violation",
        reason="a metric that one outlier can move is a metric to game",
        stages=("reward",),
        enforced_by=("verdict.finish", "verdict.conservative_times"),
        hacks=_in("test_defences", "test_an_implausible_speed_up_is_a_violation")
              + _in("test_baselines", "test_a_noisy_baseline_does_not_make_a_slow_kernel_a_3"),
        honest=_in("test_baselines", "test_a_kernel_that_is_faster_at_the_ci_bounds_keeps_its_3"),
    ),
    Defence(
        id="harness_reach", threat=None,
        refuses="reaching the interpreter, the import machinery or the harness through names torch and the "
                "allowed modules re-export",
        rule="no attribute named like a module, an escape hatch or an interpreter internal on any object; no "
             "string evaluated by a library (annotations); torch's refused names under any alias",
        reason="from `sys` or `builtins` every other rule can be undone",
        stages=("static",),
        enforced_by=("policy.FORBIDDEN_ATTRIBUTES", "policy.FORBIDDEN_TORCH_ATTRS", "policy.FORBIDDEN_BUILTINS",
                     "policy.ALLOWED_DUNDERS", "static_check.check_candidate"),
        hacks=_in("test_hacks", "dispatch_internals", "builtins_escape", "reexported_sys_patches_guard",
                  "dataclasses_builtins_setattr", "annotation_evaluated_by_typing",
                  "annotation_evaluated_by_typing_imported_by_name", "class_made_by_type",
                  "module_held_by_a_torch_module", "import_machinery_held_by_a_torch_module",
                  "torch_imported_as_another_name", "torch_reexported_by_a_torch_module", "torch_kept_on_the_model")
              + _in("test_model_new_reach", "test_no_allowed_chain_leaves_torch_math_and_typing"),
        honest=_in("test_hacks", "test_type_hints_of_every_kind_pass_the_static_check",
                   "test_the_models_own_attributes_may_have_any_name"),
    ),
    Defence(
        id="foreign_self", threat=None,
        refuses="calling the candidate's own methods with another object (torch) as `self`",
        rule="`self` is only ever the candidate's own object: its methods are bound the way honest code binds them",
        reason="`self._C` on a foreign self was torch._C: the rules for the model's own names would cover torch's",
        stages=("static",),
        enforced_by=("self_binding.self_binding_violations",),
        hacks=_in("test_hacks", "guard_popped_through_a_foreign_self")
              + _in("test_self_binding", "test_a_method_called_with_a_foreign_self_is_refused"),
        honest=_in("test_self_binding", "test_methods_as_honest_code_uses_them_are_rewarded"),
    ),
    Defence(
        id="torch_compiler", threat=None,
        refuses="torch's own compiler (torch.compile, nn.Module.compile) as the candidate's kernels",
        rule="`compile` is refused as an attribute on any object, `torch.compiler` and `_inductor` too",
        reason="kernels torch generates are not the candidate's, and torch.compile is one of the baselines",
        stages=("static",),
        enforced_by=("policy.FORBIDDEN_ATTRIBUTES", "policy.FORBIDDEN_TORCH_ATTRS"),
        hacks=_in("test_hacks", "torch_compiler_module", "module_compile_method"),
        honest=HONEST_SCALE_BIAS,
    ),
    Defence(
        id="rng_state", threat=None,
        refuses="reading or setting the random state (to precompute the evaluation's inputs)",
        rule="no seed, RNG state or generator names on any object",
        reason="inputs the candidate can predict are inputs it can answer in advance",
        stages=("static",),
        enforced_by=("policy.FORBIDDEN_ATTRIBUTES", "policy.FORBIDDEN_TORCH_ATTRS"),
        hacks=_in("test_hacks", "initial_seed_precompute"),
        honest=_in("test_checked_calls", "test_the_seeds_a_child_is_told_predict_nothing"),
    ),
    Defence(
        id="code_left_behind", threat=None,
        refuses="code the candidate leaves for the harness to run later: replaced torch functions, finalizers, "
                "properties",
        rule="the candidate's Python runs only on its turns (import, construction, each forward); any of its "
             "code run outside them is a violation",
        reason="code run after the call runs outside the compute guard and the timer",
        stages=("turns",),
        enforced_by=("child.turns.Turns",),
        hacks=_in("test_hacks", "torch_patched_through_an_alias", "finalizer_on_the_output")
              + _in("test_gpu", "test_a_torch_fallback_left_for_the_harness_to_run_is_a_violation")
              + _in("test_turns", "test_the_candidates_code_outside_its_turns_is_recorded"),
        honest=_in("test_hacks", "test_helpers_called_from_forward_are_the_candidates_turn")
               + _in("test_turns", "test_nothing_is_recorded_on_the_candidates_turns"),
    ),
    Defence(
        id="macro_assembly", threat=None,
        refuses="assembling a refused name from parts with macros or token pasting",
        rule="the source rules apply to the candidate's lines as its compiler read them, macros expanded; line "
             "directives are refused",
        reason="a rule on raw text is a rule on spelling",
        stages=("expanded",),
        enforced_by=("compiler.expansion.violations", "policy.FORBIDDEN_SOURCE_PATTERNS"),
        hacks=_in("test_hacks", "own_macro_names_attr", "library_macro_pastes_python_api", "token_pasting")
              + _in("test_gpu", "test_cuda_sources_are_checked_as_the_compiler_reads_them")
              + _in("test_expansion", "test_line_directives_are_refused"),
        honest=_in("test_hacks", "test_a_kernel_written_with_macros_is_accepted"),
        policy_reasons=(
            "token pasting (identifiers must be spelled out)",
        ),
    ),
    Defence(
        id="host_files_at_build", threat=None,
        refuses="reading a host file at compile time (`#include` of an absolute path, `#embed`, `.incbin`)",
        rule="directives that read outside the build folder are refused before compiling; every compiler and "
             "linker runs in a jail that holds only the toolchain and the build",
        reason="the compiler quotes an included file's lines: the worker's files, the reference's answers",
        stages=("static", "compile"),
        enforced_by=("static_check.hidden_incbin", "compiler.jail.Jail"),
        hacks=_in("test_hacks", "incbin_reads_worker_files")
              + _in("test_file_directives", "test_a_kernel_that_reads_a_host_file_is_refused_before_compiling")
              + _in("test_expansion", "test_incbin_assembled_from_string_literals_is_found")
              + _in("test_compiler_jail", "test_a_build_cannot_read_a_host_file"),
        honest=_in("test_file_directives", "test_the_skills_includes_pass")
               + _in("test_compiler_jail", "test_an_honest_build_works_in_the_jail_and_its_result_is_cached"),
    ),
    Defence(
        id="process_hooks", threat=None,
        refuses="native code the harness runs outside the call: allocator hooks, operator observers, the dynamic "
                "linker's tables, the Python C API, dispatch keys",
        rule="the extension's objects import none of these symbols, however the source spelled them",
        reason="an allocator that computes the next output while the harness allocates works outside the timer",
        stages=("symbols",),
        enforced_by=("policy.FORBIDDEN_SYMBOL_PATTERNS", "compiler.symbols.check_object_symbols"),
        hacks=_in("test_hacks", "allocator_hook", "operator_observer", "dynamic_linker_state",
                  "exclude_python_dispatch_key", "pysys_modules", "phdr_symbol_scan", "python_from_cpp",
                  "test_the_symbols_of_process_hooks_are_refused"),
        honest=_in("test_symbols", "test_honest_code_with_library_calls_passes"),
        policy_reasons=(
            "Python C API execution",
            "importing Python from C++",
            "reaching Python builtins from C++",
            "taking the Python lock or OpenMP's internals from kernel code",
            "dispatcher state",
            "the Python C API (bindings use pybind11's m.def only)",
            "reaching Python objects from C++",
            "inspecting loaded libraries",
            "hooking torch's process-wide machinery (allocators, operator callbacks, thread pools)",
            "dynamic loading",
            "Python execution",
            "reaching Python internals",
            "reaching Python's private runtime state",
        ),
    ),
    Defence(
        id="forged_messages", threat=None,
        refuses="writing the child's messages or outputs itself: its pipe, its descriptors, system calls",
        rule="file-descriptor I/O and inline system calls are refused in the built objects; the parent accepts "
             "messages only in the protocol's order and outputs only in the layout it expects",
        reason="the candidate runs in the process that reports its verdict",
        stages=("symbols", "protocol"),
        enforced_by=("compiler.symbols.check_object_symbols", "session.Protocol", "outputs.read_outputs"),
        hacks=_in("test_hacks", "forge_by_write", "forge_by_inline_system_call")
              + _in("test_protocol", "test_forged_messages_are_a_violation",
                    "test_the_protocol_refuses_any_other_order")
              + _in("test_output_region", "test_a_forged_layout_is_a_format_error")
              + _in("test_symbols", "test_an_inline_system_call_is_found_and_the_finding_kept"),
        honest=_in("test_protocol", "test_the_protocol_accepts_the_childs_own_order"),
        policy_reasons=(
            "file descriptor I/O",
        ),
    ),
)
"""Every defence, the public threat classes first (by number), then the classes found by red-teaming."""


def by_id(defence_id: str) -> Defence:
    """The record named `defence_id`; KeyError naming the known ids otherwise."""
    for defence in CATALOGUE:
        if defence.id == defence_id:
            return defence
    raise KeyError(f"no defence {defence_id!r}; known: {', '.join(d.id for d in CATALOGUE)}")


def owning_reason(why: str) -> Defence | None:
    """The record whose `policy_reasons` hold `why` (a reason of policy.py's source or symbol patterns)."""
    for defence in CATALOGUE:
        if why in defence.policy_reasons:
            return defence
    return None


def claiming(test_file: str, case: str) -> Defence:
    """The record whose hacks name `case` of `test_file` (a path under tests/); KeyError when none does."""
    ref = f"{test_file}::{case}"
    for defence in CATALOGUE:
        if ref in defence.hacks:
            return defence
    raise KeyError(f"{ref} is in no defence's hacks: add it to sandbox_pool/harness/defences/catalogue.py")

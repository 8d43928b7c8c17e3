"""docs/defences.md, rendered from the catalogue (a test fails when the committed file differs)."""

from __future__ import annotations

from cuda_agent.sandbox_pool.harness.defences.catalogue import CATALOGUE
from cuda_agent.sandbox_pool.harness.defences.model import ENFORCER_ROOT, STAGE_DOCS, Defence

HEADER = """\
# Defences

<!-- Generated from sandbox_pool/harness/defences/catalogue.py by `cuda-agent defences --markdown >
docs/defences.md`; tests/sandbox_pool/harness/test_defences.py fails when this file is stale. -->

Every capability the harness refuses a candidate: the rule, the code that enforces it, the cheating candidates
that must fail and the honest twins that must pass. The records live in
[`sandbox_pool/harness/defences/catalogue.py`](../sandbox_pool/harness/defences/catalogue.py); the hack tests
take their ids from them (`pytest -k <id>` runs one defence's hacks), and the source and symbol pattern checks name
the defence that refuses what they found (`... is not allowed (reason) [defence <id>]`). `threat` is the public class a record
answers (the taxonomy of KernelBench, Sakana's robust-kbench, CUDA-L1/L2 and METR, numbered 1-25); `-` marks
a class this project's red team found. How each stage works: [harness.md](harness.md#what-is-checked).
Enforcers are named under `{root}`.

| defence | threat | refuses | stages |
|---|---|---|---|
"""


def _stage_links(defence: Defence) -> str:
    return ", ".join(f"[{stage}]({STAGE_DOCS[stage]})" for stage in defence.stages)


def _row(defence: Defence) -> str:
    threat = str(defence.threat) if defence.threat is not None else "-"
    return f"| [{defence.id}](#{defence.id}) | {threat} | {defence.refuses} | {_stage_links(defence)} |"


def _test_link(ref: str) -> str:
    path, case = ref.split("::", 1)
    return f"[`{path.rsplit('/', 1)[-1]}::{case}`](../{path})"


def _section(defence: Defence) -> str:
    lines = [f"### {defence.id}", "",
             f"- **refuses**: {defence.refuses}",
             f"- **rule**: {defence.rule}",
             f"- **why**: {defence.reason}",
             f"- **enforced by**: {', '.join(f'`{name}`' for name in defence.enforced_by)}"]
    if defence.hacks:
        lines.append(f"- **must fail**: {', '.join(_test_link(ref) for ref in defence.hacks)}")
    else:
        lines.append(f"- **must fail**: no test yet: {defence.untested}")
    lines.append(f"- **must pass**: {', '.join(_test_link(ref) for ref in defence.honest)}")
    if defence.policy_reasons:
        lines.append(f"- **names the violations of** (policy.py's reasons): "
                     f"{'; '.join(f'`{why}`' for why in defence.policy_reasons)}")
    return "\n".join(lines)


def markdown() -> str:
    """The whole of docs/defences.md."""
    table = "\n".join(_row(d) for d in CATALOGUE)
    sections = "\n\n".join(_section(d) for d in CATALOGUE)
    return HEADER.format(root=ENFORCER_ROOT) + table + "\n\n## Records\n\n" + sections + "\n"

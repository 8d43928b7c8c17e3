"""Data synthesis (the paper's CUDA-Agent-Ops-6K pipeline): crawl -> compose -> filter -> decontam -> export.

One module per stage, each a function over JSONL task files (resumable, idempotent)::

    crawl.crawl(out)                                    seed tasks from torch / transformers operators
    compose.compose(out, count=...)                     fused tasks (programmatic or LLM), deduplicated
    filter.filter_tasks(tasks, out_dir, FilterConfig)   execution filter (isolated processes, local or Ray)
    decontam.decontaminate(tasks, out_dir, kernelbench) AST-similarity decontamination
    export.export(tasks, out_dir)                       veRL / SFT parquet, KernelBench folders
    importer.import_tasks(path, out)                    read CUDA-Agent-Ops-6K or similar collections
    pipeline.run_pipeline(PipelineConfig(...))          everything, plus the dataset report (dataset_report.py)

`stage.py` says when a stage's output may be reused (settings recorded or keyed per record) and
what a stage must hand on; the filter's checks are in filter/ (hack.py, ablation.py, probes.py).

`models.Task` is the record every stage exchanges; the CLI is ``cuda-agent data`` (cli.py).
Importing this package loads neither torch nor transformers.
"""

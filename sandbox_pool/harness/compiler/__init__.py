"""Compile candidates: toolchain detection, precompiled headers, the cached builder, symbol policy."""

from cuda_agent.sandbox_pool.harness.compiler.builder import BuildResult, build_extension, default_cache_dir

__all__ = ["BuildResult", "build_extension", "default_cache_dir"]

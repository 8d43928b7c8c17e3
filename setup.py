"""Maps the top-level folders onto the single `cuda_agent` import namespace.

The README's layout table fixes the folder layout (sandbox_pool/, tools/, reward_fns/, data_gen/,
recipe/cuda_agent/); every folder is installed under `cuda_agent.*` so that no generic
top-level name (`tools`, `data_gen`) lands in site-packages.
"""

from setuptools import find_packages, setup

ROOTS = {
    "cuda_agent": "cuda_agent",
    "cuda_agent.sandbox_pool": "sandbox_pool",
    "cuda_agent.tools": "tools",
    "cuda_agent.reward_fns": "reward_fns",
    "cuda_agent.data_gen": "data_gen",
    "cuda_agent.recipe": "recipe/cuda_agent",
    "cuda_agent.evaluation": "evaluation",
    "cuda_agent.service": "service",
}


def _packages() -> tuple[list[str], dict[str, str]]:
    packages: list[str] = []
    package_dir: dict[str, str] = {}
    for name, folder in ROOTS.items():
        package_dir[name] = folder
        packages.append(name)
        for sub in find_packages(where=folder):
            packages.append(f"{name}.{sub}")
            package_dir[f"{name}.{sub}"] = f"{folder}/{sub.replace('.', '/')}"
    return packages, package_dir


PACKAGES, PACKAGE_DIR = _packages()
setup(packages=PACKAGES, package_dir=PACKAGE_DIR)

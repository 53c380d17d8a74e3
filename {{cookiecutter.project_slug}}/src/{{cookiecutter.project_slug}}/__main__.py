"""`python -m {{ cookiecutter.project_slug }}`: lists the project's commands."""

COMMANDS = """\
{{ cookiecutter.project_slug }}: a PyTorch training project whose runs repeat bit for bit.

  python -m {{ cookiecutter.project_slug }}.train --out runs/a      train (--help lists every setting)
  python -m {{ cookiecutter.project_slug }}.train --out runs/a --resume
                                      continue an interrupted run exactly
  python -m {{ cookiecutter.project_slug }}.verify runs/a           re-run a recorded run and compare step by step
  python -m {{ cookiecutter.project_slug }}.compare runs/a runs/b   two runs side by side
  python -m {{ cookiecutter.project_slug }}.evaluate runs/a         scores a run's model.pt (--split), no training
  python -m {{ cookiecutter.project_slug }}.doctor                  is this machine set up for bitwise repeats?
  python -m {{ cookiecutter.project_slug }}.study --seeds 0-4 --out studies/base
                                      one run per seed, their statistics and a picture
  python -m {{ cookiecutter.project_slug }}.plot runs/a runs/b --out curves.png
                                      the training loss and every validation figure, drawn
  torchrun --standalone --nproc-per-node 2 -m {{ cookiecutter.project_slug }}.train --out runs/ddp
                                      several processes (DistributedDataParallel)
"""

if __name__ == "__main__":
    print(COMMANDS, end="")

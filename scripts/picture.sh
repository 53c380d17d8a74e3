#!/usr/bin/env bash
# Makes the study pictures the READMEs show, with the generated README's own commands: bakes the
# template (once per dataset) into a scratch folder, runs the README's two studies (learning rate
# 0.05 and 0.01, seeds 0-4 each) and its plot command, writing PNG instead of PDF, then copies
#   the synthetic-data picture to docs/study.png (the template README's) and, for each dataset,
#   into the template folder's docs/, where each baked project gets the picture of its own data.
# About 5 minutes on two cores. Usage: bash scripts/picture.sh
source "$(dirname "${BASH_SOURCE[0]}")/setup_env.sh"
TEMPLATE_DOCS="$ROOT/{{cookiecutter.project_slug}}/docs"
SCRATCH="$(mktemp -d)"
trap 'rm -rf "$SCRATCH"' EXIT
mkdir -p "$ROOT/docs" "$TEMPLATE_DOCS"
for dataset in synthetic digits; do
  echo "baking the template with dataset=$dataset into $SCRATCH/$dataset..." >&2
  "$PY" -m cookiecutter --no-input --output-dir "$SCRATCH/$dataset" "$ROOT" dataset="$dataset" init_git=no >/dev/null
  cd "$SCRATCH/$dataset/my_project"
  export PYTHONPATH="$PWD/src"  # the project as it was baked, without installing it
  echo "two studies of 5 seeds each ($dataset), then their picture..." >&2
  # The generated README's commands ("Studies" and "Pictures and tracking"), --out aside:
  "$PY" -m my_project.study --seeds 0-4 --out studies/base --jobs 2 >&2
  "$PY" -m my_project.study --seeds 0-4 --out studies/lr01 --jobs 2 --lr 0.01 >&2
  "$PY" -m my_project.plot studies/base studies/lr01 --label "lr 0.05" --label "lr 0.01" \
    --title "Learning rate, 5 seeds each" --smooth 5 --x epochs --out study.png >&2
  cp study.png "$TEMPLATE_DOCS/{% if cookiecutter.dataset == '$dataset' %}study.png{% endif %}"
  if [ "$dataset" = synthetic ]; then cp study.png "$ROOT/docs/study.png"; fi
  cd "$ROOT"
done
"$PY" - <<'PYTHON'
import datetime, os, platform, torch
print(f"made on {datetime.date.today()}, {os.cpu_count()} cores, {platform.machine()} {platform.system()}, "
      f"Python {platform.python_version()}, torch {torch.__version__}, GPU: {torch.cuda.is_available()}")
PYTHON
echo "wrote docs/study.png and {{cookiecutter.project_slug}}/docs/ (one picture per dataset)"

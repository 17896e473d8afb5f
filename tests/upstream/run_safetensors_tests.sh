#!/usr/bin/env bash
# Runs huggingface/safetensors' Python tests twice in .venv: against the real
# `safetensors` package (the baseline), then with `safetensors` aliased to
# ckpt.safetensors. The tests are not part of this repository: pass a
# checkout of https://github.com/huggingface/safetensors (any copy whose
# bindings/python/tests holds them). They write files under their own
# folder, so a scratch copy of it is used.
#
#   tests/upstream/run_safetensors_tests.sh /path/to/safetensors [pytest args...]
set -euo pipefail
checkout=${1:?usage: $0 /path/to/safetensors-checkout [pytest args...]}
shift
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
python=$root/.venv/bin/python
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
cp -r "$checkout/bindings/python/tests" "$scratch/tests"
cd "$scratch"
files=(tests/test_simple.py tests/test_pt_comparison.py tests/test_pt_model.py tests/test_handle.py
       tests/test_threadable.py tests/test_multithreaded.py tests/test_pread_backend.py
       tests/test_flax_comparison.py tests/test_tf_comparison.py)
status=0
echo "== baseline: huggingface safetensors $("$python" -c 'import safetensors; print(safetensors.__version__)')"
"$python" -m pytest -q -p no:cacheprovider -rs "${files[@]}" "$@" || status=$?
echo "== ckpt.safetensors"
PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}" "$python" -m pytest -q -p no:cacheprovider -rs \
  -p safetensors_as_ckpt "${files[@]}" "$@" || status=$?
exit $status

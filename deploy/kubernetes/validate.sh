#!/usr/bin/env bash
# Validate deploy/kubernetes/*.yaml against the Kubernetes OpenAPI schemas, strictly (an unknown field
# is an error), for the newest and an older supported release. kubernetes-validate (PyPI) ships the
# schemas, so nothing but the package registry is reached. Run by .ci/test.
set -euo pipefail
cd "$(dirname "$0")/../.."
venv=target/k8s-venv
if ! "$venv/bin/kubernetes-validate" --version >/dev/null 2>&1; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check kubernetes-validate
fi
for k in 1.37.0 1.29.0; do
    "$venv/bin/kubernetes-validate" --strict --quiet -k "$k" deploy/kubernetes/*.yaml
done
echo "deploy/kubernetes: valid for Kubernetes 1.37 and 1.29 (strict)"

"""rltap's repository-only tools, not published: `rltap demo` (added to the `rltap` command by
an entry point), the integration matrix (`rltap_dev.matrix`) and the README runner
(`rltap_dev.readme`). Each needs this repository (examples/, .nox/, README.md), so rltap's wheel
leaves them out; `make bootstrap` installs this package editable into .venv."""

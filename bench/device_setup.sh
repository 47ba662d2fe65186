# Sourced by the device scripts (footprint*): with R (the output folder) and OLD (the tree compared
# with, default the device copy's root) set, installs this tree, the old tree apart in /tmp/oldsite
# (run it as $OLDM) and textual, py-spy, nvidia-ml-py and nvitop from the carried wheels; writes
# the card, driver and Python to $R/machine.txt.
python3 -m pip install -q --no-index --find-links "$OLD/.whl" textual py-spy nvidia-ml-py nvitop >/dev/null 2>&1
python3 -m pip install -q --no-index --no-deps --no-build-isolation . >/dev/null 2>&1
python3 -m pip install -q --no-index --no-deps --no-build-isolation --target /tmp/oldsite "$OLD" >/dev/null 2>&1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$R/machine.txt"
python3 --version >> "$R/machine.txt"
OLDM="env PYTHONPATH=/tmp/oldsite python3 -P -m memtop"

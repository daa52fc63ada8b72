"""Offline stand-in for pip's get-pip.py, for `ansible-test sanity` on a machine that reaches
the package index but not the host ansible-test downloads get-pip.py from.

ansible-test runs this file inside each fresh sanity venv (created without pip) with the
get-pip.py command line: pip's own wheel is bootstrapped from the Python installation
(ensurepip), then pip installs what ansible-test asked for. get-pip.py's own options
(--no-setuptools, --no-wheel) are not pip install options and are dropped.
"""

import ensurepip
import subprocess
import sys

ensurepip.bootstrap()
args = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]
sys.exit(subprocess.call([sys.executable, "-m", "pip", "install", "--upgrade", *args]))

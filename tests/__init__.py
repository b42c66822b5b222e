"""Test suite; REPO is the repository root, for tests that run entrypoints or read results/."""

import os

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

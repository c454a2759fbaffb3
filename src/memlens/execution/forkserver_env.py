"""Imported first in the forkserver that isolated.isolated_forkserver starts (its preload):
puts back the environment variables that started it isolated (PYTHONSAFEPATH,
PYTHONNOUSERSITE, memlens's folder on PYTHONPATH), so each process it forks, and the
script simulated there, sees the environment the user gave memlens. Importing it is its
whole job; nothing else imports it."""

from __future__ import annotations

import json
import os

from memlens.execution.isolated import RESTORE, restore_environ

if RESTORE in os.environ:
    restore_environ(json.loads(os.environ.pop(RESTORE)))

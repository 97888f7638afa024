"""``python -m attention_learner check NOTEBOOK``: the learner's check of a notebook."""

import sys

from attention_learner.notebook_check import main

sys.exit(main())

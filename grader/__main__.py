import os
import sys

from grader.cli import main

if __name__ == "__main__":
    code = main()
    if os.environ.get("GRADER_PHASES"):  # where the time went (grader/autograde/phases.py)
        from grader.autograde import phases

        phases.write()
    # Everything is written and closed by now (results, gradebook, fork server). Skip the
    # interpreter's teardown of torch, nbgrader and SQLAlchemy: measured at 0.5 to 1.5 s here,
    # a tenth of grading a class of twenty.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)

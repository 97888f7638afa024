"""``python -m grader autograde``: grade a folder of submissions, fast and safely.

The pieces, in the order a submission meets them:

- ``submissions``: find the submitted notebooks and read them (invalid ones get a status);
- ``sanitize``: nbgrader's own preprocessors restore test and locked cells from the source;
- ``sandbox`` and ``execution``: one fresh child process per submission, forked from a
  server that has already imported numpy and torch, with limits and a timeout;
- ``judging``: the parent re-decides every check from the raw arrays the child sent back;
- ``scoring``: nbgrader's determine_grade, the gradebook, and the autograded notebooks;
- ``reports``: results.json, feedback.html and grades.csv.
"""

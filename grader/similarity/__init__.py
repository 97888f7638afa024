"""``python -m grader similarity``: which submissions share their code (evidence, not a verdict).

For each assignment and each exercise (a solution cell of the source, by nbgrader grade id)
every pair of submissions is compared, and so is every submission with each known solution
(the source's own, and the notebooks of every ``--against`` folder). ``REPORT/similarity.csv``
(one row per pair at or above the threshold, best first), ``REPORT/known_solutions.csv`` (one
row per submission matching a known solution) and ``REPORT/similarity.html`` (the known
matches, clusters, and the top pairs side by side with their matching regions) are written.
Nothing here touches a grade.

How, module by module:

- ``exercises``: the source's exercises and what the learner was given for each (the
  released notebook's code: setup and test cells, and each solution cell's stub), and which
  of a notebook's cells are locked (by the source's metadata, by grade id); submissions are
  found by ``grader.autograde.submissions.find_submissions`` and read by
  ``grader.autograde.notebook_file.read_notebook``;
- ``submitted``: what a submission holds for an exercise: its cell and every cell the
  learner could edit (added cells, and the answer's definitions moved into another
  exercise's cell), never a cell the source locks, whatever the submitted metadata claims;
- ``normalise``: each cell parsed with ``ast`` and read as tokens that renaming, reordering,
  comments, blank lines, prints and other dead expressions, literals, layout and extracting
  or inlining a helper barely change, by the facts about names ``scope`` finds (what a cell
  binds, imports, calls, and what each assignment reads and writes); ``ordering``: the
  canonical order of a run of assignments, linear in their size;
- ``guards``: what one submission may cost (size, nesting, a time budget), so that none
  stops or stalls the report for the class;
- ``winnowing``: hashed k-grams of those tokens, winnowed as MOSS does;
- ``scoring``: an inverted index fingerprint -> submissions (those that share none are never
  scored), each fingerprint weighted by its rarity (IDF over the exercise's submissions;
  those held by more than half of them dropped), every pair sharing one scored by weighted
  Jaccard, clusters as connected components, and matching regions grown token by token;
- ``known``: where the known solutions are, and each submission against each of them (plain
  Jaccard, nothing dropped as common: ten students handing in the reference solution are
  ten matches even though, to the pairs, their code is common knowledge);
- ``run``: the command (find, fingerprint, score, write; clusters also link submissions that
  are identical once normalised, so ten alike are one cluster of ten); ``html_report``: the page.

A cell that cannot be compared (a notebook that is not JSON or is nested deeper than the
parser follows, no code of the learner's for that exercise, a cell that does not parse or
is too large, a notebook over its time budget) is listed in the report with the reason; the
others are compared as usual. Cells left out of a submission that was compared (an added
cell over the size limit, the exercise's own cell missing) are listed as notes.

Why the default threshold is 0.5. Measured with ``tests/test_similarity.py`` on chapter 3's
``scaled_dot_product_attention``, in a class of the course's solution, a copy of it and ten
correct solutions written independently (``benchmarks/similarity.py`` for 1,000):

- the course's solution and its copy renamed, with comments, blank lines and prints, with
  changed literals, reformatted, with a helper extracted, or all of these at once: 1.00;
  an independent solution and its copy with the helper inlined: 1.00; chapter 4's
  MultiHeadAttention with its statements and methods reordered: 1.00; the solution
  restructured (a helper extracted above its caller, two statements merged, an argument
  computed in the call): 0.75;
- the eleven independent solutions against each other: at most 0.17 (the course's against
  one that normalises with the same ``np.divide(..., where=...)`` idiom), two pairs above
  0.1, and 17 of the 55 pairs share no fingerprint at all;
- a copy with four of its nine statements rewritten in other idioms: 0.33;
- in the benchmark's class of 1,000, whose generated students combine a few common idioms
  per step (far more alike than real ones), 50,340 of the 499,500 pairs of the NumPy
  exercise score 0.2 or more, 957 score 0.5 or more (94 of them planted copies, all found,
  1.00) and 110 score 0.8 or more.

0.5 sits three times above the highest independent score of the test class and well below
the weakest planted disguise; in the generated class it keeps the pairs that share most of
their steps, and it asks of a copy that it still share more than half of its code (by
rarity) with its original. A copy rewritten more than that is not found at 0.5:
``--threshold 0.3`` finds the four-statement rewrite above, at the price of more honest
pairs to read.
"""

DEFAULT_THRESHOLD = 0.5

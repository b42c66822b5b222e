"""The report layer: markdown and figures from results.json files alone. It imports the
science modules and is never imported by them (tests/test_layers.py); importing it selects
matplotlib's Agg backend.

    run_report        one workdir's report.md and figures (experiments.run writes it)
    combined_report   the paper's Tables 1-5 from `make reproduce` and the SGD-regime tables
    generalized_report  appendix C and looped layers
    regime_report     several training regimes of one problem side by side
    noise_report      the SGD law against optimiser noise (sgd_noise.md, the sweep table)
    findings          FINDINGS.md, one row per claim of the paper
    markdown          the table and cell helpers they share
"""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402,F401  (the report modules' pyplot, backend set)

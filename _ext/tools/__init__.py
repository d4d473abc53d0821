"""The command-line tools: `ext-roc` (roc.py, the full ROC command),
`ext-roc11` (roc11.py, the 2018 blog's script), `ext-plot-roc` (plot_roc.py,
curve files overlaid) and `ext-roc-table` (roc_table.py, the TAR@FAR table of
several reports); what they share (cli.py, progress.py), the files they read
(embeddings.py) and IJB template features (templates.py). scripts/<name>.py
runs the same code from a checkout."""

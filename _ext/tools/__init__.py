"""The command-line tools: `ext-roc` (roc.py, the full ROC command) and
`ext-roc11` (roc11.py, the 2018 blog's script), and the embedding files they
read (embeddings.py). scripts/roc.py and scripts/roc11.py run the same code
from a checkout."""

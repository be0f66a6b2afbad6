"""``python -m airflow_ckpt_provider.cli`` runs ``ckpt``."""

import sys

from airflow_ckpt_provider.cli import main

sys.exit(main())

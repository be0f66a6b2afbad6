"""A "new version" that crashes before its query starts: the upgrade must roll back."""

import sys

from pyspark.sql import SparkSession

SparkSession.builder.appName("crash-on-start").getOrCreate()
print("deliberate crash: this version cannot start", file=sys.stderr)
sys.exit(3)

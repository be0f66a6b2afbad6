"""The DAG factories of the provider: the reference upgrade DAG generated from the step table."""

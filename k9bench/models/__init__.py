"""Loading models: the Hub checks before a load (hub), one accelerator policy for every model (accelerator)."""

"""The IPVS DR configurator: config, reconcile, status, self-test, real servers, export, weights."""

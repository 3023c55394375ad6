"""`pykubelet crictl`: crictl's common commands over the CRI client (see :mod:`pykubelet.crictl.main`)."""

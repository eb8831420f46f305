"""Real engines for the slow test tier: provisioning, tiny models and server fixtures.

- :mod:`tests.realengines.provision` builds/installs llama.cpp's ``llama-server``, the vLLM CPU
  build and Debian's Prometheus/Alertmanager/Chromium, cached outside the checkout.
- :mod:`tests.realengines.models` writes tiny deterministic random-weight models.
- :mod:`tests.realengines.servers` starts real servers on loopback and drives load.
"""

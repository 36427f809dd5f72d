"""The Jupyter server extension: REST API, event stream, service-port proxy, execute API."""

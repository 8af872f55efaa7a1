"""`layerfuse serve`: one cache root shared over HTTP (read-only zarr, a JSON API, an extraction
queue for the server's own device, a web page). See `app.create_app`."""

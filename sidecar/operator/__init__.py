"""What operators use: the commands (tenants, config, mode), the dashboard and its
history, the pod reporter (`qos-sidecar report`), and the view of the running gateway
they read. It may use everything else; nothing else imports it but the server and the
command line."""

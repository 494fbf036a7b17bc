# Shared by the bench scripts (sourced): a free loopback port, a field of a JSON document on
# stdin, and nginx `return 200` standing in for a fast bot.

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

json() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }

# nginx_bot DIR PORT: nginx answering 200 to everything on 127.0.0.1:PORT, in the background,
# its files in DIR (its pid in DIR/nginx.pid, for the caller's trap to kill).
nginx_bot() {
  command -v nginx >/dev/null || apt-get install -y -qq nginx >/dev/null
  cat >"$1/nginx.conf" <<NGINX
worker_processes 1;
daemon off;
pid $1/nginx.pid;
error_log $1/nginx.err;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $1;
  server { listen 127.0.0.1:$2; keepalive_requests 1000000; location / { return 200; } }
}
NGINX
  nginx -c "$1/nginx.conf" &
}

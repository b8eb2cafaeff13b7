#!/usr/bin/env bash
# tests/s3/s3_server.sh start|stop DIR: a throw-away S3-compatible server on 127.0.0.1 for the S3
# tests (the CTest fixture s3_server): OpenStack Swift with its S3 layer (s3api), from Debian's
# packages swift-proxy swift-account swift-container swift-object (scripts/ckpt-dev installs them).
# Swift was chosen (tests/s3/README.md) because it checks AWS Signature V4 and implements multipart
# uploads with abort and listing, ranged GETs and ListObjectsV2 pages, which the npm servers do not
# all do. Everything lives under DIR: the rings, the configs, the data, the logs; the ports are
# free ones picked at start. `start` writes DIR/endpoint (http://127.0.0.1:PORT) once the server
# answers; the S3 key is "test:tester", the secret "testing", the region us-east-1.
set -euo pipefail
action=${1:?start or stop}
dir=$(realpath -m "${2:?the server folder}")

stop() {
  local pids=()
  for file in "$dir"/run/*.pid; do
    [ -e "$file" ] && pids+=("$(cat "$file")") && rm -f "$file"
  done
  [ ${#pids[@]} -gt 0 ] || return 0
  kill "${pids[@]}" 2>/dev/null || true
  local alive
  for _ in $(seq 1 30); do
    alive=0
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [ $alive = 1 ] || return 0
    sleep 0.1
  done
  kill -9 "${pids[@]}" 2>/dev/null || true
}

if [ "$action" = stop ]; then
  stop
  exit 0
fi
[ "$action" = start ] || { echo "usage: $0 start|stop DIR" >&2; exit 2; }
for program in swift-ring-builder swift-proxy-server swift-object-server swift-container-server swift-account-server; do
  command -v "$program" > /dev/null || {
    echo "s3_server.sh: $program not found: apt-get install swift-proxy swift-account swift-container" \
         "swift-object (scripts/ckpt-dev deps installs them)" >&2
    exit 1
  }
done

stop  # a server left by an interrupted run
rm -rf "$dir"
mkdir -p "$dir/node/d1" "$dir/run" "$dir/log"
cd "$dir"
# Four free ports: object, container, account servers and the proxy (the S3 endpoint).
read -r object_port container_port account_port proxy_port < <(python3 - <<'EOF'
import socket
sockets = [socket.socket() for _ in range(4)]
for s in sockets:
    s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in sockets])
EOF
)
for server in object:$object_port container:$container_port account:$account_port; do
  name=${server%%:*}
  port=${server##*:}
  swift-ring-builder "$name.builder" create 10 1 1 >/dev/null
  swift-ring-builder "$name.builder" add "r1z1-127.0.0.1:$port/d1" 1 >/dev/null
  swift-ring-builder "$name.builder" rebalance >/dev/null
  cat > "$name-server.conf" <<EOF
[DEFAULT]
bind_ip = 127.0.0.1
bind_port = $port
devices = $dir/node
mount_check = false
swift_dir = $dir
workers = 0
log_name = $name-server
log_level = WARNING
[pipeline:main]
pipeline = $name-server
[app:$name-server]
use = egg:swift#$name
EOF
done
cat > proxy-server.conf <<EOF
[DEFAULT]
bind_ip = 127.0.0.1
bind_port = $proxy_port
swift_dir = $dir
workers = 0
log_level = WARNING
[pipeline:main]
pipeline = catch_errors gatekeeper proxy-logging cache listing_formats s3api tempauth copy slo dlo proxy-logging proxy-server
[app:proxy-server]
use = egg:swift#proxy
account_autocreate = true
[filter:tempauth]
use = egg:swift#tempauth
user_test_tester = testing .admin
[filter:s3api]
use = egg:swift#s3api
location = us-east-1
[filter:cache]
use = egg:swift#memcache
[filter:catch_errors]
use = egg:swift#catch_errors
[filter:gatekeeper]
use = egg:swift#gatekeeper
[filter:proxy-logging]
use = egg:swift#proxy_logging
[filter:listing_formats]
use = egg:swift#listing_formats
[filter:copy]
use = egg:swift#copy
[filter:slo]
use = egg:swift#slo
[filter:dlo]
use = egg:swift#dlo
EOF
for name in object container account proxy; do
  setsid "swift-$name-server" "$name-server.conf" > "log/$name.log" 2>&1 < /dev/null &
  echo $! > "run/$name.pid"
done
# Ready when every server accepts connections and the proxy answers HTTP.
if ! python3 - "$object_port" "$container_port" "$account_port" "$proxy_port" <<'EOF'
import socket, sys, time, urllib.request, urllib.error
ports = [int(p) for p in sys.argv[1:]]
deadline = time.time() + 90
while time.time() < deadline:
    try:
        for p in ports[:3]:
            socket.create_connection(("127.0.0.1", p), timeout=1).close()
        try:
            urllib.request.urlopen("http://127.0.0.1:%d/" % ports[3], timeout=2)
        except urllib.error.HTTPError:
            pass  # any HTTP answer will do
        sys.exit(0)
    except OSError:
        time.sleep(0.1)
sys.exit(1)
EOF
then
  echo "s3_server.sh: Swift did not start in 90 s; its logs:" >&2
  tail -n 20 log/*.log >&2
  stop
  exit 1
fi
echo "http://127.0.0.1:$proxy_port" > endpoint

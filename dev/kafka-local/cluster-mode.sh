# Sourced by dev/kafka-local/kafka-local when KAFKA_LOCAL_BROKERS is 3: a three-node KRaft cluster on
# loopback, each node a broker and a controller (a static three-voter quorum), for the tests of faults
# a cluster has and a single broker cannot (a leader or the group coordinator lost, a rolling restart).
# Topics and Kafka's own state topics (offsets, transactions, share-group state) are replicated 3
# times with min.insync.replicas=2, so one node may be down. PLAINTEXT only.
#   KAFKA_LOCAL_BROKERS=3 dev/kafka-local/kafka-local start|stop|status|bootstrap
#   KAFKA_LOCAL_BROKERS=3 dev/kafka-local/kafka-local kill|pause|resume|stop-node|start-node|pid N   (N: 1, 2 or 3)
# kill is SIGKILL; pause and resume are SIGSTOP and SIGCONT (a broker that stops answering: a long GC
# pause, a network partition); stop-node is a clean stop (SIGTERM), start-node starts the node again
# on its data. `stop` stops every node and deletes the data.
# Node N listens on KAFKA_CLUSTER_PORT + 10 * (N - 1) (19092, 19102, 19112 by default), its controller
# on the next port. Data and logs go to KAFKA_CLUSTER_DIR (target/kafka-cluster/node-N by default).
# Each node's heap is KAFKA_CLUSTER_HEAP_OPTS (-Xms128m -Xmx512m: three nodes, the tests and Spark on
# 2 cores and 24 GiB).

nodes=3
cluster_port="${KAFKA_CLUSTER_PORT:-19092}"
cluster_dir="${KAFKA_CLUSTER_DIR:-$root/target/kafka-cluster}"
cluster_heap="${KAFKA_CLUSTER_HEAP_OPTS:--Xms128m -Xmx512m}"

node_port() { echo $((cluster_port + 10 * ($1 - 1))); }
node_controller_port() { echo $(($(node_port "$1") + 1)); }
node_dir() { echo "$cluster_dir/node-$1"; }
bootstrap() { local n out=""; for ((n = 1; n <= nodes; n++)); do out+="${out:+,}localhost:$(node_port "$n")"; done; echo "$out"; }

node_pid() {
  local pid
  pid="$(cat "$(node_dir "$1")/broker.pid" 2>/dev/null)" || return 1
  [ -n "$pid" ] && ps -ww -p "$pid" -o args= 2>/dev/null | grep -q 'kafka\.Kafka' && echo "$pid"
}

check_node() { [[ "${1:-}" =~ ^[1-3]$ ]] || die "name a node: 1, 2 or 3"; }

write_node_properties() {
  local n="$1" voters="" i
  for ((i = 1; i <= nodes; i++)); do voters+="${voters:+,}$i@localhost:$(node_controller_port "$i")"; done
  cat > "$(node_dir "$n")/server.properties" <<EOF
# Written by dev/kafka-local/kafka-local (KAFKA_LOCAL_BROKERS=3) start; regenerated on every start.
process.roles=broker,controller
node.id=$n
controller.quorum.voters=$voters
listeners=PLAINTEXT://127.0.0.1:$(node_port "$n"),CONTROLLER://127.0.0.1:$(node_controller_port "$n")
advertised.listeners=PLAINTEXT://localhost:$(node_port "$n"),CONTROLLER://localhost:$(node_controller_port "$n")
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=$(node_dir "$n")/data
num.partitions=1
default.replication.factor=3
min.insync.replicas=2
offsets.topic.replication.factor=3
transaction.state.log.replication.factor=3
transaction.state.log.min.isr=2
share.coordinator.state.topic.replication.factor=3
share.coordinator.state.topic.min.isr=2
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=false
# Lets tests set short per-group lock durations (group config share.record.lock.duration.ms >= 1 s).
group.share.min.record.lock.duration.ms=1000
group.share.max.partition.max.record.locks=10000
EOF
}

start_node() {
  local n="$1" cp="$2" dir
  dir="$(node_dir "$n")"
  if node_pid "$n" > /dev/null; then return 0; fi
  port_answers "$(node_port "$n")" && die "port $(node_port "$n") is already in use by another process (set KAFKA_CLUSTER_PORT)"
  # shellcheck disable=SC2086 # $cluster_heap is a list of JVM options
  setsid nohup java $cluster_heap -XX:+UseG1GC -Djava.awt.headless=true \
    -Dlog4j2.configurationFile="$root/dev/kafka-local/log4j2-broker.properties" -Dkafka.logs.dir="$dir" \
    -cp "$cp" kafka.Kafka "$dir/server.properties" >> "$dir/broker.log" 2>&1 < /dev/null &
  echo $! > "$dir/broker.pid"
}

wait_for_node() {
  local n="$1" deadline=$((SECONDS + 120))
  until port_answers "$(node_port "$n")"; do
    node_pid "$n" > /dev/null || { tail -n 40 "$(node_dir "$n")/broker.log" >&2; die "node $n exited during start-up"; }
    [ "$SECONDS" -lt "$deadline" ] || die "node $n did not answer on localhost:$(node_port "$n") within 120 s"
    sleep 1
  done
}

cluster_start() {
  local cp uuid n i
  cp="$("$root/dev/sbt-classpath" kafkaLocal kafka_2.13-)"
  mkdir -p "$cluster_dir"
  for ((n = 1; n <= nodes; n++)); do
    mkdir -p "$(node_dir "$n")"
    write_node_properties "$n"
  done
  if [ ! -f "$(node_dir 1)/data/meta.properties" ]; then
    uuid="$(java -cp "$cp" kafka.tools.StorageTool random-uuid)"
    for ((n = 1; n <= nodes; n++)); do
      java -Dlog4j2.configurationFile="$root/dev/kafka-local/log4j2-tools.properties" -cp "$cp" \
        kafka.tools.StorageTool format -t "$uuid" -c "$(node_dir "$n")/server.properties" --feature share.version=1 \
        >> "$(node_dir "$n")/broker.log" 2>&1 || { tail -n 20 "$(node_dir "$n")/broker.log" >&2; die "formatting node $n failed"; }
    done
    echo "Formatted three nodes (cluster id $uuid)"
  fi
  for ((n = 1; n <= nodes; n++)); do start_node "$n" "$cp"; done
  for ((i = 0; i < 10; i++)); do
    node_pid 1 > /dev/null && node_pid 2 > /dev/null && node_pid 3 > /dev/null && break
    sleep 1
  done
  for ((n = 1; n <= nodes; n++)); do wait_for_node "$n"; done
  # Every node registered as a broker: a topic with 3 replicas can be made.
  local deadline=$((SECONDS + 120))
  until [ "$("$tool" broker-api-versions --bootstrap-server "$(bootstrap)" 2>/dev/null | grep -c '^localhost:')" -eq 3 ]; do
    [ "$SECONDS" -lt "$deadline" ] || die "the three nodes did not all register within 120 s"
    sleep 1
  done
  echo "Kafka $(kafka_version_of "$cp") cluster of three nodes on $(bootstrap) (share groups enabled); stop with:" \
    "KAFKA_LOCAL_BROKERS=3 dev/kafka-local/kafka-local stop"
}

signal_node() {
  local n="$1" sig="$2" pid
  pid="$(node_pid "$n")" || die "node $n is not running"
  kill "-$sig" "$pid"
}

stop_node() {
  local n="$1" pid i
  pid="$(node_pid "$n")" || return 0
  kill -CONT "$pid" 2>/dev/null || true # a paused node cannot stop
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < 30; i++)); do kill -0 "$pid" 2>/dev/null || return 0; sleep 1; done
  kill -KILL "$pid" 2>/dev/null || true
}

cluster_main() {
  case "${1:-}" in
    start) cluster_start ;;
    stop)
      for ((n = 1; n <= nodes; n++)); do stop_node "$n" & done
      wait
      rm -rf "$cluster_dir"
      echo "Stopped the three nodes and removed $cluster_dir" ;;
    status)
      for ((n = 1; n <= nodes; n++)); do
        if node_pid "$n" > /dev/null; then echo "node $n: running on localhost:$(node_port "$n")"; else echo "node $n: down"; fi
      done ;;
    bootstrap) bootstrap ;;
    pid) check_node "${2:-}"; node_pid "$2" || die "node $2 is not running" ;;
    kill) check_node "${2:-}"; signal_node "$2" KILL ;;
    pause) check_node "${2:-}"; signal_node "$2" STOP ;;
    resume) check_node "${2:-}"; signal_node "$2" CONT ;;
    stop-node) check_node "${2:-}"; stop_node "$2" ;;
    start-node)
      check_node "${2:-}"
      start_node "$2" "$("$root/dev/sbt-classpath" kafkaLocal kafka_2.13-)"
      wait_for_node "$2" ;;
    *) echo "usage: KAFKA_LOCAL_BROKERS=3 dev/kafka-local/kafka-local start|stop|status|bootstrap|pid|kill|pause|resume|stop-node|start-node [N]" >&2
      exit 2 ;;
  esac
}

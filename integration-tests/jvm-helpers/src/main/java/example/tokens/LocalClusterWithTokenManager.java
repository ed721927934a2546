package example.tokens;

import java.util.regex.Matcher;
import java.util.regex.Pattern;

import org.apache.spark.SparkContext;
import org.apache.spark.deploy.LocalSparkCluster;
import org.apache.spark.deploy.security.HadoopDelegationTokenManager;
import org.apache.spark.scheduler.ExternalClusterManager;
import org.apache.spark.scheduler.SchedulerBackend;
import org.apache.spark.scheduler.TaskScheduler;
import org.apache.spark.scheduler.TaskSchedulerImpl;
import org.apache.spark.scheduler.cluster.StandaloneSchedulerBackend;

import scala.Option;

/**
 * Spark's {@code local-cluster} (executors in JVMs of their own) with the delegation-token manager that
 * Spark's YARN and Kubernetes scheduler backends start and the standalone one does not: master
 * {@code local-cluster-with-token-manager[<workers>,<cores>,<memory MiB>]}. Everything else is Spark's: the
 * manager logs in with {@code spark.kerberos.keytab}, its providers (Kafka's, from
 * spark-token-provider-kafka) obtain the tokens, and the driver ships them to the executors as they
 * register and whenever the manager obtains new ones.
 */
public final class LocalClusterWithTokenManager implements ExternalClusterManager {
  private static final Pattern MASTER =
      Pattern.compile("local-cluster-with-token-manager\\[\\s*(\\d+)\\s*,\\s*(\\d+)\\s*,\\s*(\\d+)\\s*]");

  @Override
  public boolean canCreate(String master) {
    return MASTER.matcher(master).matches();
  }

  @Override
  public TaskScheduler createTaskScheduler(SparkContext sc, String master) {
    return new TaskSchedulerImpl(sc);
  }

  @Override
  public SchedulerBackend createSchedulerBackend(SparkContext sc, String master, TaskScheduler scheduler) {
    Matcher m = MASTER.matcher(master);
    if (!m.matches()) throw new IllegalArgumentException("not a local-cluster-with-token-manager master: " + master);
    LocalSparkCluster cluster = LocalSparkCluster.apply(
        Integer.parseInt(m.group(1)), Integer.parseInt(m.group(2)), Integer.parseInt(m.group(3)), sc.conf());
    return new Backend((TaskSchedulerImpl) scheduler, sc, cluster);
  }

  @Override
  public void initialize(TaskScheduler scheduler, SchedulerBackend backend) {
    ((TaskSchedulerImpl) scheduler).initialize(backend);
  }

  /** The standalone backend, with the token manager YARN's backend makes. */
  private static final class Backend extends StandaloneSchedulerBackend {
    private final SparkContext sc;
    private final LocalSparkCluster cluster;

    Backend(TaskSchedulerImpl scheduler, SparkContext sc, LocalSparkCluster cluster) {
      super(scheduler, sc, cluster.start());
      this.sc = sc;
      this.cluster = cluster;
    }

    @Override
    public Option<HadoopDelegationTokenManager> createTokenManager() {
      return Option.apply(new HadoopDelegationTokenManager(sc.conf(), sc.hadoopConfiguration(), driverEndpoint()));
    }

    @Override
    public void stop() {
      try {
        super.stop();
      } finally {
        cluster.stop();
      }
    }
  }
}

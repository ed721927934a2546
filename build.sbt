// spark-kafka-share: a Spark Structured Streaming source for Kafka share groups (KIP-932).
//
// Spark 4.3.0 is not published to Maven Central; pyspark 4.3.0 on PyPI ships the same jars.
// The build therefore compiles and tests against the jars of the pyspark installed in the
// project's virtualenv (see `sparkJars`), and keeps them out of the assembly like `provided`.

import sbtassembly.AssemblyPlugin.autoImport._

ThisBuild / organization := "io.github.sparkkafkashare"
ThisBuild / version := "0.1.0-SNAPSHOT"
ThisBuild / scalaVersion := "2.13.18"
ThisBuild / javacOptions ++= Seq("--release", "17")
ThisBuild / scalacOptions ++= Seq("-release", "17", "-deprecation", "-feature", "-Wunused:imports,privates,locals")

val kafkaVersion = "4.4.0"
// The broker and command-line tools of the local cluster (sbt project kafkaLocal). The connector always
// builds with kafka-clients `kafkaVersion`; KAFKA_BROKER_VERSION runs its tests against another broker.
val brokerVersion = sys.env.getOrElse("KAFKA_BROKER_VERSION", kafkaVersion)
val sparkVersion = "4.3.0"
val spark35Version = "3.5.9"
// kafka-clients' OAuth login handler (OAUTHBEARER with a token endpoint) needs jose4j, and leaves it to
// the application; the version Kafka's own broker uses. (Its other need, Jackson, comes with Spark.)
val jose4jVersion = "0.9.6"

/** The jars directory of pyspark in the virtualenv (or of SPARK_HOME when set). */
lazy val sparkJarsDir = taskKey[File]("Spark jars the connector compiles and tests against")

def locateSparkJars(base: File): File = {
  val fromEnv = sys.env.get("SPARK_JARS_DIR").orElse(sys.env.get("SPARK_HOME").map(_ + "/jars")).map(file)
  val fromVenv = (base / ".venv" / "lib" ** "site-packages" / "pyspark" / "jars").get.headOption
  fromEnv.orElse(fromVenv).getOrElse(sys.error(
    "No Spark jars found: run `make venv` first (it installs pyspark " + sparkVersion +
      " into .venv), or set SPARK_JARS_DIR to a directory holding Spark " + sparkVersion + " jars."))
}

/**
 * Published as Maven Central wants it, so that a release is only signing and uploading: the assembly
 * (kafka-clients and jose4j relocated inside) as the main jar, a POM that declares neither of them,
 * sources and javadoc jars, licence and SCM. `make publish-local` writes the repository to
 * target/maven-repo.
 */
lazy val publishedSettings: Seq[Setting[_]] = Seq(
  Compile / packageBin / publishArtifact := false,
  assembly / artifact := (assembly / artifact).value.withClassifier(None),
  publishTo := Some(MavenCache("local-maven", (ThisBuild / baseDirectory).value / "target" / "maven-repo")),
  publishMavenStyle := true,
  versionScheme := Some("early-semver"),
  pomPostProcess := { pom =>
    import scala.xml.{Elem, Node, NodeSeq}
    import scala.xml.transform.{RewriteRule, RuleTransformer}
    val shaded = Set("kafka-clients", "jose4j")
    new RuleTransformer(new RewriteRule {
      override def transform(n: Node): Seq[Node] = n match {
        case e: Elem if e.label == "dependency" && shaded((e \ "artifactId").text) => NodeSeq.Empty
        case other => other
      }
    }).transform(pom).head
  },
  description := "Spark Structured Streaming source for Kafka share groups (KIP-932)",
  homepage := Some(url("https://github.com/spark-kafka-share/spark-kafka-share")),
  licenses := Seq("Apache-2.0" -> url("https://www.apache.org/licenses/LICENSE-2.0.txt")),
  scmInfo := Some(ScmInfo(url("https://github.com/spark-kafka-share/spark-kafka-share"),
    "scm:git:https://github.com/spark-kafka-share/spark-kafka-share.git")),
  developers := List(Developer("spark-kafka-share", "spark-kafka-share developers", "",
    url("https://github.com/spark-kafka-share"))),
  Compile / doc / scalacOptions ++= Seq("-no-link-warnings")
) ++ addArtifact(assembly / artifact, assembly)

/** What every build of the connector shares; `sparkLines` are the Spark lines the jar runs on. */
def connectorSettings(sparkLines: Seq[String]): Seq[Setting[_]] = publishedSettings ++ Seq(

    libraryDependencies ++= Seq(
      "org.apache.kafka" % "kafka-clients" % kafkaVersion excludeAll (
        // Spark provides these; keeping them out avoids two copies in the assembly.
        ExclusionRule("org.slf4j"),
        ExclusionRule("org.xerial.snappy"),
        ExclusionRule("org.lz4"),
        ExclusionRule("at.yawk.lz4"),
        ExclusionRule("com.github.luben")
      ),
      "org.bitbucket.b_c" % "jose4j" % jose4jVersion exclude ("org.slf4j", "slf4j-api"),
      "org.scalatest" %% "scalatest" % "3.2.19" % Test
    ),
    // What SupportedSpark checks at load(): the Spark lines and the Scala version this jar is built for.
    Compile / sourceGenerators += Def.task {
      val out = (Compile / sourceManaged).value / "io" / "github" / "sparkkafkashare" / "BuiltFor.scala"
      IO.write(out,
        s"""package io.github.sparkkafkashare
           |
           |/** Written by the build: what this jar is built for. */
           |private[sparkkafkashare] object BuiltFor {
           |  val scalaBinaryVersion: String = "${scalaBinaryVersion.value}"
           |  /** Comma-separated: a plain string, which any Scala version reads (see SupportedSpark). */
           |  val sparkLines: String = "${sparkLines.mkString(", ")}"
           |}
           |""".stripMargin)
      Seq(out)
    }.taskValue,
    Test / fork := true,
    Test / javaOptions ++= Seq("-Xmx3g", "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
      "--add-opens=java.base/java.nio=ALL-UNNAMED", "--add-opens=java.base/java.lang=ALL-UNNAMED",
      "--add-opens=java.base/java.util=ALL-UNNAMED", "--add-opens=java.base/sun.util.calendar=ALL-UNNAMED",
      "--add-opens=java.base/java.lang.invoke=ALL-UNNAMED", "-Djdk.reflect.useDirectMethodHandle=false"),
    Test / envVars ++= sys.env.get("KAFKA_BOOTSTRAP_SERVERS").map("KAFKA_BOOTSTRAP_SERVERS" -> _).toMap,
    // Where dev/kafka-local keeps the broker's pid, for the suites that pause the broker.
    Test / envVars += "KAFKA_LOCAL_STATE" -> sys.env.get("KAFKA_DATA_DIR").map(d => file(d).getAbsoluteFile.getParentFile)
      .getOrElse((ThisBuild / baseDirectory).value / "target" / "kafka-local").getAbsolutePath,
    Test / parallelExecution := false,
    assembly / assemblyOption ~= (_.withIncludeScala(false)),
    assembly / assemblyShadeRules := Seq(
      // Spark's own Kafka connector brings kafka-clients 3.x; ours must not meet it on the classpath.
      ShadeRule.rename("org.apache.kafka.**" -> "io.github.sparkkafkashare.shaded.kafka.@1").inAll,
      // Private to the shaded client, so it cannot meet another jose4j of the application.
      ShadeRule.rename("org.jose4j.**" -> "io.github.sparkkafkashare.shaded.jose4j.@1").inAll
    ),
    assembly / assemblyMergeStrategy := {
      case PathList("META-INF", "services", _*) => MergeStrategy.filterDistinctLines
      case PathList("META-INF", xs @ _*) if xs.lastOption.exists(n => n.endsWith(".SF") || n.endsWith(".DSA") || n.endsWith(".RSA")) => MergeStrategy.discard
      case PathList("META-INF", "versions", _*) => MergeStrategy.first
      case "module-info.class" => MergeStrategy.discard
      case x => (assembly / assemblyMergeStrategy).value(x)
    }
)

// The connector for Spark 4.0 to 4.3, built against Spark 4.3 (the jars of pyspark 4.3.0); what moved
// between those lines is read by name (org.apache.spark.sql.kafkashare.ClassicSparkApi, RunningStreamingQuery).
lazy val connector = project
  .in(file("connector"))
  .settings(connectorSettings(Seq("4.0", "4.1", "4.2", "4.3")))
  .settings(
    name := "spark-kafka-share",
    // Real-time mode's classes implement Spark 4.1's interfaces: the Spark 3.5 build leaves them out.
    Compile / unmanagedSourceDirectories += (Compile / sourceDirectory).value / "scala-spark4.1",
    sparkJarsDir := locateSparkJars((ThisBuild / baseDirectory).value),
    Compile / unmanagedJars ++= (sparkJarsDir.value ** "*.jar").classpath,
    assembly / assemblyJarName := s"spark-kafka-share-assembly-${version.value}.jar",
    assembly / assemblyExcludedJars := {
      val spark = sparkJarsDir.value.getCanonicalPath + java.io.File.separator
      (assembly / fullClasspath).value.filter(_.data.getCanonicalPath.startsWith(spark))
    },
    // S3A, for the records log's tests on an S3 emulator (moto, from the virtualenv): hadoop-aws of the
    // Hadoop in pyspark's jars, with the AWS SDK's modules S3A uses rather than its 686 MB bundle, and
    // without what Spark's jars already have.
    libraryDependencies ++= {
      val providedBySpark = Seq(ExclusionRule("org.apache.httpcomponents"), ExclusionRule("commons-codec"),
        ExclusionRule("commons-logging"), ExclusionRule("org.slf4j"), ExclusionRule("io.netty"))
      Seq(
        ("org.apache.hadoop" % "hadoop-aws" % "3.5.0" % Test).exclude("software.amazon.awssdk", "bundle")
          .exclude("org.wildfly.openssl", "wildfly-openssl"),
        ("software.amazon.awssdk" % "s3-transfer-manager" % "2.35.4" % Test).excludeAll(providedBySpark: _*))
    },
    Test / envVars ++= Map(
      "S3_EMULATOR_PYTHON" -> ((ThisBuild / baseDirectory).value / ".venv" / "bin" / "python").getAbsolutePath,
      "S3_EMULATOR" -> ((ThisBuild / baseDirectory).value / "integration-tests" / "s3_emulator.py").getAbsolutePath
    )
  )

// The connector for Spark 3.5, from the same sources, built against Spark 3.5 from Maven Central with
// Scala 2.12 (crossScalaVersions: 2.13 too, for Spark 3.5's Scala 2.13 builds). Only its assembly is
// built and tested (make test-compat); the ScalaTest suites run against Spark 4.3.
lazy val connectorSpark35 = project
  .in(file("connector/spark-3.5"))
  .settings(connectorSettings(Seq("3.5")))
  .settings(
    name := "spark-kafka-share-spark35",
    scalaVersion := "2.12.18",
    crossScalaVersions := Seq("2.12.18", "2.13.16"),
    scalacOptions := Seq("-release", "17", "-deprecation", "-feature") ++
      (if (scalaBinaryVersion.value == "2.12") Seq("-Ywarn-unused:imports,privates,locals") else Seq("-Wunused:imports,privates,locals")),
    Compile / unmanagedSourceDirectories := Seq((connector / Compile / scalaSource).value),
    Compile / unmanagedResourceDirectories := (connector / Compile / unmanagedResourceDirectories).value,
    libraryDependencies += "org.apache.spark" %% "spark-sql" % spark35Version % Provided,
    assembly / assemblyJarName := s"spark-kafka-share-spark35_${scalaBinaryVersion.value}-assembly-${version.value}.jar"
  )

// Spark 3.5 built for Scala 2.13, from Maven Central: pyspark 3.5 ships only the Scala 2.12 build, so
// make test-compat runs its Scala 2.13 row with these jars as SPARK_HOME's (dev/compat/run). Not published.
lazy val spark35Scala213 = project
  .in(file("dev/compat/spark-3.5-scala-2.13"))
  .settings(
    name := "spark35-scala213",
    publish / skip := true,
    // The Scala of Spark 3.5's 2.13 distribution; a dependency asks for a later scala-library, which
    // the distribution does not ship either.
    scalaVersion := "2.13.8",
    dependencyOverrides += "org.scala-lang" % "scala-library" % scalaVersion.value,
    libraryDependencies += "org.apache.spark" %% "spark-sql" % spark35Version
  )

// A single-node Kafka broker and Kafka's command-line tools, run from jars on Maven Central
// (dev/kafka-local and dev/kafka-tool read this project's runtime classpath). Not published.
lazy val kafkaLocal = project
  .in(file("dev/kafka-local"))
  .settings(
    name := "kafka-local",
    publish / skip := true,
    libraryDependencies ++= Seq(
      "org.apache.kafka" %% "kafka" % brokerVersion,
      "org.apache.kafka" % "kafka-tools" % brokerVersion,
      "org.apache.logging.log4j" % "log4j-slf4j2-impl" % "2.25.4",
      "org.apache.logging.log4j" % "log4j-core" % "2.25.4"
    )
  )

// A Kerberos KDC on loopback (Hadoop's MiniKdc, on Apache Kerby), for the tests of the source's GSSAPI
// login (dev/kdc-local reads this project's runtime classpath). Not published.
lazy val kdcLocal = project
  .in(file("dev/kdc-local"))
  .settings(
    name := "kdc-local",
    publish / skip := true,
    libraryDependencies += "org.apache.hadoop" % "hadoop-minikdc" % "3.5.0"
  )

// Spark's own `kafka` source, which `make bench` runs side by side with kafka-share (its scenario c).
// Maven Central serves it up to Spark 4.2.0, not 4.3.0; Spark itself comes from pyspark at run time.
// Not published, and never on the connector's classpath.
lazy val sparkKafkaSource = project
  .in(file("benchmarks/spark-kafka-source"))
  .settings(
    name := "spark-kafka-source",
    publish / skip := true,
    libraryDependencies += "org.apache.spark" %% "spark-sql-kafka-0-10" % "4.2.0"
  )

// S3A, for `make bench`'s exactly-once strategies with the checkpoint on an S3 endpoint (an emulator
// run locally). hadoop-aws must match the Hadoop of pyspark's jars (hadoop-client-api 3.5.0), which
// also provides hadoop-common at run time. spark-hadoop-cloud holds Spark's checkpoint file manager
// for object stores; Maven Central serves it up to Spark 4.1.2 (built against the same
// CheckpointFileManager as 4.3.0), and only its own jar is wanted. Not published, and never on the
// connector's classpath.
lazy val objectStore = project
  .in(file("benchmarks/object-store"))
  .settings(
    name := "object-store",
    publish / skip := true,
    libraryDependencies ++= Seq(
      "org.apache.hadoop" % "hadoop-aws" % "3.5.0",
      "org.apache.spark" %% "spark-hadoop-cloud" % "4.1.2" intransitive ()
    )
  )

// SASL callback handlers of a package of their own, compiled against Kafka's unshaded kafka-clients as
// a cloud provider's are (AWS MSK IAM's): integration-tests/test_security.py logs in through them
// (dev/sbt-classpath providerHandlers provider-handlers-). Java only; not published.
lazy val providerHandlers = project
  .in(file("integration-tests/provider-handlers"))
  .settings(
    name := "provider-handlers",
    publish / skip := true,
    crossPaths := false,
    autoScalaLibrary := false,
    exportJars := true,
    libraryDependencies ++= Seq("org.apache.kafka" % "kafka-clients" % kafkaVersion, "org.bitbucket.b_c" % "jose4j" % jose4jVersion)
  )

// A JVM driver application for integration-tests/test_standalone_cluster.py: a standalone master restarts
// only JVM drivers under --deploy-mode cluster --supervise (dev/sbt-classpath supervisedDriver
// supervised-driver- names its jar). Java, built against Spark 4.3 for Spark 4 and against Spark 3.5 for
// Spark 3.5 (supervisedDriverSpark35): the streaming writer's builder methods return another type in each.
// Not published.
/** The integration tests' own Java jars: no Scala library, no cross paths, not published. */
val integrationJavaSettings: Seq[Setting[_]] = Seq(
  publish / skip := true,
  crossPaths := false,
  autoScalaLibrary := false,
  exportJars := true,
  javacOptions ++= Seq("--release", "17")
)

lazy val supervisedDriver = project
  .in(file("integration-tests/supervised-driver"))
  .settings(integrationJavaSettings)
  .settings(
    name := "supervised-driver",
    sparkJarsDir := locateSparkJars((ThisBuild / baseDirectory).value),
    Compile / unmanagedJars ++= (sparkJarsDir.value * "*.jar").classpath
  )

lazy val supervisedDriverSpark35 = project
  .in(file("integration-tests/supervised-driver/spark-3.5"))
  .settings(integrationJavaSettings)
  .settings(
    name := "supervised-driver-spark35",
    scalaVersion := "2.12.18",
    Compile / unmanagedSourceDirectories := Seq((supervisedDriver / Compile / javaSource).value),
    libraryDependencies += "org.apache.spark" %% "spark-sql" % spark35Version % Provided
  )

// The integration tests' JVM classes (dev/sbt-classpath jvmHelpers jvm-helpers-): a Hadoop file system
// that misbehaves once at an after-log part (the fault matrix), and a foreach sink that writes each row as
// it gets it (real-time mode). Java, against the Spark and Hadoop of pyspark's jars. Not published.
lazy val jvmHelpers = project
  .in(file("integration-tests/jvm-helpers"))
  .settings(integrationJavaSettings)
  .settings(
    name := "jvm-helpers",
    sparkJarsDir := locateSparkJars((ThisBuild / baseDirectory).value),
    Compile / unmanagedJars ++= (sparkJarsDir.value * "*.jar").classpath
  )

// The examples users copy (examples/scala, examples/java), compiled against the connector's API with
// Spark provided (pyspark's jars); make test runs them with spark-submit (integration-tests/test_examples.py).
// Not published.
lazy val examples = project
  .in(file("examples"))
  .dependsOn(connector)
  .settings(
    name := "examples",
    publish / skip := true,
    Compile / scalaSource := baseDirectory.value / "scala",
    Compile / javaSource := baseDirectory.value / "java",
    Compile / packageBin / artifactPath := baseDirectory.value / "target" / "examples.jar",
    sparkJarsDir := locateSparkJars((ThisBuild / baseDirectory).value),
    Compile / unmanagedJars ++= (sparkJarsDir.value * "*.jar").classpath
  )

lazy val root = project
  .in(file("."))
  .aggregate(connector)
  .settings(publish / skip := true)

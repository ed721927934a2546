package io.github.sparkkafkashare;

import java.lang.annotation.ElementType;
import java.lang.annotation.Retention;
import java.lang.annotation.RetentionPolicy;
import java.lang.annotation.Target;

import org.scalatest.TagAnnotation;

/**
 * A suite that talks to the local Kafka broker (make kafka-up) or to the S3 emulator it starts:
 * make test runs it, make test-unit, which needs neither, leaves it out.
 */
@TagAnnotation
@Retention(RetentionPolicy.RUNTIME)
@Target({ElementType.METHOD, ElementType.TYPE})
public @interface UsesLocalServices {}

package example.provider;

import org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler;

/**
 * A cloud provider's OAUTHBEARER login handler, as such libraries are built (AWS MSK IAM's
 * IAMOAuthBearerLoginCallbackHandler among them): a class of its own package, compiled against
 * Kafka's unshaded kafka-clients. It gets its tokens with Kafka's own handler, from the token
 * endpoint in sasl.oauthbearer.token.endpoint.url.
 */
public class ProviderTokenLoginHandler extends OAuthBearerLoginCallbackHandler {
}

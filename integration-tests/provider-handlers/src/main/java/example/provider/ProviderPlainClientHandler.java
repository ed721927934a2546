package example.provider;

import java.util.List;
import java.util.Map;
import javax.security.auth.callback.Callback;
import javax.security.auth.callback.NameCallback;
import javax.security.auth.callback.PasswordCallback;
import javax.security.auth.callback.UnsupportedCallbackException;
import javax.security.auth.login.AppConfigurationEntry;

import org.apache.kafka.common.security.auth.AuthenticateCallbackHandler;

/**
 * A provider's SASL client handler, compiled against Kafka's unshaded kafka-clients, that answers
 * the mechanism's credential callbacks itself (as AWS MSK IAM's IAMClientCallbackHandler answers
 * AWS_MSK_IAM's): here PLAIN's user name and password, from options provider_user and
 * provider_password of its login module's entry in sasl.jaas.config.
 */
public class ProviderPlainClientHandler implements AuthenticateCallbackHandler {
    private String user;
    private String password;

    @Override
    public void configure(Map<String, ?> configs, String saslMechanism, List<AppConfigurationEntry> jaasConfigEntries) {
        if (!"PLAIN".equals(saslMechanism)) {
            throw new IllegalArgumentException("mechanism " + saslMechanism + " is not PLAIN");
        }
        Map<String, ?> options = jaasConfigEntries.get(0).getOptions();
        user = (String) options.get("provider_user");
        password = (String) options.get("provider_password");
    }

    @Override
    public void handle(Callback[] callbacks) throws UnsupportedCallbackException {
        for (Callback callback : callbacks) {
            if (callback instanceof NameCallback) {
                ((NameCallback) callback).setName(user);
            } else if (callback instanceof PasswordCallback) {
                ((PasswordCallback) callback).setPassword(password.toCharArray());
            } else {
                throw new UnsupportedCallbackException(callback);
            }
        }
    }

    @Override
    public void close() {
    }
}

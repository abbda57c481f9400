package dev.cdcpipe.connect;

import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.Base64;
import java.util.Map;
import java.util.Set;
import java.util.regex.Pattern;
import java.util.stream.Collectors;

import jakarta.ws.rs.Priorities;
import jakarta.ws.rs.container.ContainerRequestContext;
import jakarta.ws.rs.container.ContainerRequestFilter;
import jakarta.ws.rs.core.MediaType;
import jakarta.ws.rs.core.Response;

import org.apache.kafka.connect.rest.ConnectRestExtension;
import org.apache.kafka.connect.rest.ConnectRestExtensionContext;

/**
 * REST users of Kafka Connect that may read everything and restart a task, nothing else.
 *
 * <p>Connect's basic-auth extension authenticates but has no per-user rights: every user it knows is an admin
 * who may create, reconfigure or delete connectors and reset their offsets. A monitor needs none of that; what
 * it holds should not be able to. The users named in the worker's {@code cdcpipe.rest.limited.users}
 * (comma-separated) may send {@code GET} and {@code HEAD} anywhere, and {@code POST} only to
 * {@code /connectors/NAME/tasks/N/restart} (a healer's one write: a task failed on a fault of the moment);
 * anything else is refused with 403, naming the rule. Put it after the basic-auth extension in
 * {@code rest.extension.classes}: that one checks the password, this one only reads whose it is (the user name
 * of the request's basic credentials), so the order in which Jersey runs the two does not matter.
 */
public final class LimitedRestUsers implements ConnectRestExtension {

    public static final String USERS = "cdcpipe.rest.limited.users";
    private static final Set<String> READS = Set.of("GET", "HEAD");
    private static final Pattern TASK_RESTART = Pattern.compile("/?connectors/[^/]+/tasks/[0-9]+/restart/?");

    private Set<String> users = Set.of();

    @Override
    public void configure(Map<String, ?> configs) {
        Object value = configs.get(USERS);
        users = value == null ? Set.of() : Arrays.stream(value.toString().split(","))
                .map(String::trim)
                .filter(name -> !name.isEmpty())
                .collect(Collectors.toUnmodifiableSet());
    }

    @Override
    public void register(ConnectRestExtensionContext context) {
        context.configurable().register((ContainerRequestFilter) this::filter, Priorities.AUTHORIZATION);
    }

    private void filter(ContainerRequestContext request) {
        String user = basicUser(request.getHeaderString("Authorization"));
        if (user == null || !users.contains(user) || allowed(request)) {
            return;
        }
        String said = "user '" + user + "' may only read (GET) and restart a task (POST /connectors/NAME/tasks/N/"
                + "restart); " + request.getMethod() + " /" + request.getUriInfo().getPath() + " needs an admin user";
        request.abortWith(Response.status(Response.Status.FORBIDDEN)
                .type(MediaType.APPLICATION_JSON)
                .entity("{\"error_code\":403,\"message\":\"" + said.replace("\"", "'") + "\"}")
                .build());
    }

    private static boolean allowed(ContainerRequestContext request) {
        String method = request.getMethod();
        return READS.contains(method)
                || "POST".equals(method) && TASK_RESTART.matcher(request.getUriInfo().getPath()).matches();
    }

    /** The user name of basic credentials ("Basic base64(user:password)"), or null if there are none. */
    static String basicUser(String header) {
        if (header == null || !header.regionMatches(true, 0, "Basic ", 0, 6)) {
            return null;
        }
        try {
            String decoded = new String(Base64.getDecoder().decode(header.substring(6).trim()), StandardCharsets.UTF_8);
            int colon = decoded.indexOf(':');
            return colon < 0 ? null : decoded.substring(0, colon);
        } catch (IllegalArgumentException malformed) {
            return null;
        }
    }

    @Override
    public String version() {
        return "1";
    }

    @Override
    public void close() {
    }
}

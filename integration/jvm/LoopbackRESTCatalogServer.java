/*
 * Iceberg's REST catalog test fixture, bound to one address.
 *
 * iceberg-open-api's RESTCatalogServer listens on every interface and logs its catalog properties
 * (a JDBC password among them); the integration services listen on 127.0.0.1 only and never print
 * a secret. So this launcher builds the same server from the fixture's own parts -- its
 * RESTServerCatalogAdapter (credential vending included) over iceberg-core's RESTCatalogAdapter and
 * RESTCatalogServlet, a catalog configured from CATALOG_* environment variables exactly as the
 * fixture reads them -- and binds it to the given host. It lives in the fixture's package because
 * those parts are package-private. integration/jvm/fetch.sh compiles it; integration/services/
 * iceberg_rest.sh runs it.
 *
 * Usage: java -cp CLASSPATH org.apache.iceberg.rest.LoopbackRESTCatalogServer HOST PORT READY_FILE
 */
package org.apache.iceberg.rest;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HashMap;
import java.util.Map;
import org.apache.iceberg.CatalogProperties;
import org.apache.iceberg.CatalogUtil;
import org.apache.iceberg.catalog.Catalog;
import org.apache.iceberg.jdbc.JdbcCatalog;
import org.eclipse.jetty.ee10.servlet.ServletContextHandler;
import org.eclipse.jetty.ee10.servlet.ServletHolder;
import org.eclipse.jetty.server.Server;
import org.eclipse.jetty.server.ServerConnector;

public final class LoopbackRESTCatalogServer {
  private LoopbackRESTCatalogServer() {}

  public static void main(String[] args) throws Exception {
    if (args.length != 3) {
      System.err.println("usage: LoopbackRESTCatalogServer HOST PORT READY_FILE");
      System.exit(2);
    }
    String host = args[0];
    int port = Integer.parseInt(args[1]);
    Path ready = Path.of(args[2]);

    // The fixture's defaults (RESTCatalogServer.initializeBackendCatalog), minus the temporary warehouse:
    // iceberg_rest.sh always sets one.
    Map<String, String> properties = new HashMap<>(RCKUtils.environmentCatalogConfig());
    properties.putIfAbsent(CatalogProperties.CATALOG_IMPL, JdbcCatalog.class.getName());
    properties.putIfAbsent("jdbc.schema-version", "V1");
    String name = properties.getOrDefault("catalog.name", "rest_backend");
    Catalog catalog = CatalogUtil.buildIcebergCatalog(name, properties, null);

    RESTCatalogAdapter adapter =
        new RESTServerCatalogAdapter(new RESTCatalogServer.CatalogContext(catalog, properties));
    ServletContextHandler context = new ServletContextHandler(ServletContextHandler.NO_SESSIONS);
    context.addServlet(new ServletHolder(new RESTCatalogServlet(adapter)), "/*");

    Server server = new Server();
    ServerConnector connector = new ServerConnector(server);
    connector.setHost(host);
    connector.setPort(port);
    server.addConnector(connector);
    server.setHandler(context);
    server.start();
    System.out.println("Iceberg REST catalog fixture '" + name + "' serving on http://" + host + ":" + port);
    Files.writeString(ready, "ready\n", StandardCharsets.UTF_8);
    server.join();
  }
}

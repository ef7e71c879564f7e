package leaselock;

import de.bwaldvogel.mongo.MongoServer;
import de.bwaldvogel.mongo.backend.memory.MemoryBackend;
import java.io.IOException;
import java.io.InputStream;
import java.net.InetSocketAddress;

/**
 * leaselock's MongoDB test server: mongo-java-server with its memory backend
 * (each collection's findAndModify is serialised, so lock races are real).
 *
 * <pre>
 * java -cp ... leaselock.LeaselockMongoServer [--host 127.0.0.1] [--port 0]
 *                                             [--parent PID] [--no-stdin]
 * </pre>
 *
 * Binds host:port (port 0: a free one), prints the bound port on a line of
 * its own and serves until one of: standard input reaches end of file (unless
 * --no-stdin), the process PID exits (--parent), SIGTERM/SIGINT.
 */
public final class LeaselockMongoServer {
   private LeaselockMongoServer() {}

   private static void usage(String why) {
      System.err.println("leaselock-mongo-server: " + why);
      System.err.println(
         "usage: LeaselockMongoServer [--host H] [--port N] [--parent PID] [--no-stdin]");
      System.exit(2);
   }

   public static void main(String[] args) throws Exception {
      String host = "127.0.0.1";
      int port = 0;
      long parent = -1;
      boolean watchStdin = true;
      for (int i = 0; i < args.length; i++) {
         String a = args[i];
         boolean hasValue = i + 1 < args.length;
         try {
            switch (a) {
               case "--host":
                  if (!hasValue) usage("--host needs a value");
                  host = args[++i];
                  break;
               case "--port":
                  if (!hasValue) usage("--port needs a value");
                  port = Integer.parseInt(args[++i]);
                  break;
               case "--parent":
                  if (!hasValue) usage("--parent needs a value");
                  parent = Long.parseLong(args[++i]);
                  break;
               case "--no-stdin":
                  watchStdin = false;
                  break;
               default:
                  usage("unknown argument " + a);
            }
         } catch (NumberFormatException e) {
            usage("not a number: " + args[i]);
         }
      }
      if (port < 0 || port > 65535) usage("port out of range: " + port);

      MongoServer server = new MongoServer(new MemoryBackend());
      try {
         server.bind(host, port);
      } catch (RuntimeException e) {
         System.err.println("leaselock-mongo-server: cannot bind " + host + ":" + port + ": " + e);
         System.exit(1);
      }
      InetSocketAddress addr = server.getLocalAddress();
      // No shutdown hook: the data lives in memory only, so exiting (on
      // SIGTERM, stdin EOF or the parent's exit) needs no graceful close.
      System.out.println(addr.getPort());
      System.out.flush();

      if (parent > 0) {
         var handle = ProcessHandle.of(parent);
         if (handle.isEmpty()) {
            System.err.println("leaselock-mongo-server: parent " + parent + " is gone");
            System.exit(0);
         }
         handle.get().onExit().thenRun(() -> Runtime.getRuntime().halt(0));
      }
      if (watchStdin) {
         InputStream in = System.in;
         byte[] buf = new byte[256];
         try {
            while (in.read(buf) >= 0) {
               // Input is ignored; only its end matters.
            }
         } catch (IOException e) {
            // A broken stdin counts as closed.
         }
         Runtime.getRuntime().halt(0);
      }
      Thread.currentThread().join();
   }
}

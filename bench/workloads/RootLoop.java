// Long-running workload loop for bench/root: one JVM does the same work over and over and
// reports its throughput, so that a root session can be attached to it and detached again.
//
//   java -cp h2.jar:. RootLoop h2 ROWS
//       H2 in memory: ROWS order rows, then for ever: point queries by an indexed column
//       (PreparedStatement.executeQuery), every 16th operation a join with grouping, every 4th
//       an update by primary key (executeUpdate: not below a query-execution root). One
//       operation = one statement.
//   java RootLoop javac OUT_DIR OPTIONS_FILE
//       javac in process (javax.tools, JDK 17's jdk.compiler) compiling the same sources again
//       and again with the options and files listed in OPTIONS_FILE (one a line); one
//       operation = one top-level class attributed (TaskEvent ANALYZE finished).
//
// Prints "ready" after the set-up and the first round of work, then "tick MS OPS" every 250 ms
// (MS since start, OPS done since start), until stdin is closed.
import com.sun.source.util.JavacTask;
import com.sun.source.util.TaskEvent;
import com.sun.source.util.TaskListener;
import java.io.Writer;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.Statement;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import java.util.concurrent.atomic.AtomicLong;
import javax.tools.Diagnostic;
import javax.tools.DiagnosticListener;
import javax.tools.JavaCompiler;
import javax.tools.JavaFileObject;
import javax.tools.StandardJavaFileManager;
import javax.tools.ToolProvider;

public class RootLoop {
    static final AtomicLong OPS = new AtomicLong();
    static volatile boolean stop;
    static long checksum;

    public static void main(String[] args) throws Exception {
        final long start = System.nanoTime();
        Thread watcher = new Thread(() -> {
            try {
                while (System.in.read() >= 0) {
                }
            } catch (Exception e) {
                // stdin gone: stop too
            }
            stop = true;
        }, "stdin-watcher");
        watcher.setDaemon(true);
        watcher.start();
        Runnable first = () -> {
            System.out.println("ready");
            System.out.flush();
            Thread ticker = new Thread(() -> {
                while (!stop) {
                    System.out.println("tick " + (System.nanoTime() - start) / 1_000_000 + " " + OPS.get());
                    System.out.flush();
                    try {
                        Thread.sleep(250);
                    } catch (InterruptedException e) {
                        return;
                    }
                }
            }, "ticker");
            ticker.setDaemon(true);
            ticker.start();
        };
        switch (args[0]) {
            case "h2":
                h2(Integer.parseInt(args[1]), first);
                break;
            case "javac":
                javac(args[1], args[2], first);
                break;
            default:
                throw new IllegalArgumentException("workload h2 or javac, not " + args[0]);
        }
        System.err.println("RootLoop: " + OPS.get() + " operations, checksum " + checksum);
    }

    static void h2(int rows, Runnable first) throws Exception {
        int customers = Math.max(1, rows / 20);
        int products = 2_000;
        Random rnd = new Random(42);
        try (Connection c = DriverManager.getConnection("jdbc:h2:mem:rootloop;LOCK_MODE=0", "sa", "")) {
            try (Statement s = c.createStatement()) {
                s.execute("CREATE TABLE customer(id INT PRIMARY KEY, name VARCHAR(64), city VARCHAR(32), balance BIGINT)");
                s.execute("CREATE TABLE product(id INT PRIMARY KEY, price DECIMAL(10,2), category INT)");
                s.execute("CREATE TABLE orders(id BIGINT PRIMARY KEY, customer_id INT, product_id INT, qty INT)");
            }
            c.setAutoCommit(false);
            try (PreparedStatement p = c.prepareStatement("INSERT INTO customer VALUES(?,?,?,?)")) {
                for (int i = 0; i < customers; i++) {
                    p.setInt(1, i);
                    p.setString(2, "customer-" + i);
                    p.setString(3, "city-" + (i % 100));
                    p.setLong(4, rnd.nextInt(1_000_000));
                    p.addBatch();
                }
                p.executeBatch();
            }
            try (PreparedStatement p = c.prepareStatement("INSERT INTO product VALUES(?,?,?)")) {
                for (int i = 0; i < products; i++) {
                    p.setInt(1, i);
                    p.setBigDecimal(2, java.math.BigDecimal.valueOf(100 + rnd.nextInt(100_000), 2));
                    p.setInt(3, i % 40);
                    p.addBatch();
                }
                p.executeBatch();
            }
            try (PreparedStatement p = c.prepareStatement("INSERT INTO orders VALUES(?,?,?,?)")) {
                for (int i = 0; i < rows; i++) {
                    p.setLong(1, i);
                    p.setInt(2, rnd.nextInt(customers));
                    p.setInt(3, rnd.nextInt(products));
                    p.setInt(4, 1 + rnd.nextInt(9));
                    p.addBatch();
                    if (i % 5000 == 4999) p.executeBatch();
                }
                p.executeBatch();
            }
            try (Statement s = c.createStatement()) {
                s.execute("CREATE INDEX orders_customer ON orders(customer_id)");
                s.execute("CREATE INDEX customer_city ON customer(city)");
            }
            c.commit();
            c.setAutoCommit(true);
            try (PreparedStatement point = c.prepareStatement(
                            "SELECT COUNT(*), SUM(qty) FROM orders WHERE customer_id = ?");
                    PreparedStatement join = c.prepareStatement(
                            "SELECT pr.category, SUM(o.qty * pr.price) FROM orders o "
                                    + "JOIN customer cu ON cu.id = o.customer_id JOIN product pr ON pr.id = o.product_id "
                                    + "WHERE cu.city = ? GROUP BY pr.category ORDER BY 2 DESC");
                    PreparedStatement update = c.prepareStatement(
                            "UPDATE customer SET balance = balance + 1 WHERE id = ?")) {
                boolean ready = false;
                for (long op = 0; !stop; op++) {
                    if (op % 16 == 15) {
                        join.setString(1, "city-" + rnd.nextInt(100));
                        try (ResultSet r = join.executeQuery()) {
                            while (r.next()) checksum += r.getInt(1);
                        }
                    } else if (op % 4 == 3) {
                        update.setInt(1, rnd.nextInt(customers));
                        checksum += update.executeUpdate();
                    } else {
                        point.setInt(1, rnd.nextInt(customers));
                        try (ResultSet r = point.executeQuery()) {
                            r.next();
                            checksum += r.getLong(1) + r.getLong(2);
                        }
                    }
                    OPS.incrementAndGet();
                    if (!ready && op == 1000) {
                        ready = true;
                        first.run();
                    }
                }
            }
        }
    }

    static void javac(String out, String optionsFile, Runnable first) throws Exception {
        List<String> options = new ArrayList<>();
        List<String> files = new ArrayList<>();
        for (String line : Files.readAllLines(Paths.get(optionsFile))) {
            if (line.isEmpty()) continue;
            if (line.endsWith(".java")) files.add(line);
            else options.add(line);
        }
        options.add("-d");
        options.add(out);
        JavaCompiler compiler = ToolProvider.getSystemJavaCompiler();
        boolean ready = false;
        while (!stop) {
            // A file manager per compilation, as a javac run has (options such as
            // --patch-module are the file manager's and may be given to it once).
            List<String> errors = new ArrayList<>();
            DiagnosticListener<JavaFileObject> diagnostics = d -> {
                if (d.getKind() == Diagnostic.Kind.ERROR) errors.add(d.toString());
            };
            try (StandardJavaFileManager fm = compiler.getStandardFileManager(diagnostics, null, null)) {
                Iterable<? extends JavaFileObject> units = fm.getJavaFileObjectsFromStrings(files);
                JavacTask task = (JavacTask) compiler.getTask(
                        Writer.nullWriter(), fm, diagnostics, options, null, units);
                task.addTaskListener(new TaskListener() {
                    @Override
                    public void finished(TaskEvent e) {
                        if (e.getKind() == TaskEvent.Kind.ANALYZE) OPS.incrementAndGet();
                    }
                });
                if (!task.call()) throw new IllegalStateException("javac reported errors: " + errors);
            }
            checksum++;
            if (!ready) {
                ready = true;
                first.run();
            }
        }
    }
}

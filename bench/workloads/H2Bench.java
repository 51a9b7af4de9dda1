// JDBC workload for bench/overhead: the work is H2's (SQL parsing, MVStore, B-tree indexes, joins).
// Usage: java -cp h2.jar:. H2Bench [rows]   (default 1,000,000 order rows)
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.Statement;
import java.util.Random;

public class H2Bench {
    static void phase(String name, long start) {
        System.err.printf("h2: %-16s done at %6.1f s%n", name, (System.nanoTime() - start) / 1e9);
    }

    public static void main(String[] args) throws Exception {
        int rows = args.length > 0 ? Integer.parseInt(args[0]) : 1_000_000;
        int customers = Math.max(1, rows / 20);
        int products = 2_000;
        Random rnd = new Random(42);
        long checksum = 0;
        long start = System.nanoTime();
        try (Connection c = DriverManager.getConnection("jdbc:h2:mem:bench;LOCK_MODE=0", "sa", "")) {
            try (Statement s = c.createStatement()) {
                s.execute("CREATE TABLE customer(id INT PRIMARY KEY, name VARCHAR(64), city VARCHAR(32), balance DECIMAL(12,2))");
                s.execute("CREATE TABLE product(id INT PRIMARY KEY, name VARCHAR(64), price DECIMAL(10,2), category INT)");
                s.execute("CREATE TABLE orders(id BIGINT PRIMARY KEY, customer_id INT, product_id INT, qty INT, created TIMESTAMP, note VARCHAR(100))");
            }
            c.setAutoCommit(false);
            try (PreparedStatement p = c.prepareStatement("INSERT INTO customer VALUES(?,?,?,?)")) {
                for (int i = 0; i < customers; i++) {
                    p.setInt(1, i);
                    p.setString(2, "customer-" + i);
                    p.setString(3, "city-" + (i % 500));
                    p.setBigDecimal(4, java.math.BigDecimal.valueOf(rnd.nextInt(1_000_000), 2));
                    p.addBatch();
                    if (i % 1000 == 999) p.executeBatch();
                }
                p.executeBatch();
            }
            try (PreparedStatement p = c.prepareStatement("INSERT INTO product VALUES(?,?,?,?)")) {
                for (int i = 0; i < products; i++) {
                    p.setInt(1, i);
                    p.setString(2, "product-" + i);
                    p.setBigDecimal(3, java.math.BigDecimal.valueOf(100 + rnd.nextInt(100_000), 2));
                    p.setInt(4, i % 40);
                    p.addBatch();
                }
                p.executeBatch();
            }
            long t0 = 1_600_000_000_000L;
            try (PreparedStatement p = c.prepareStatement("INSERT INTO orders VALUES(?,?,?,?,?,?)")) {
                for (int i = 0; i < rows; i++) {
                    p.setLong(1, i);
                    p.setInt(2, rnd.nextInt(customers));
                    p.setInt(3, rnd.nextInt(products));
                    p.setInt(4, 1 + rnd.nextInt(9));
                    p.setTimestamp(5, new java.sql.Timestamp(t0 + (long) i * 60_000L));
                    p.setString(6, (i % 7 == 0) ? "gift wrap please " + i : null);
                    p.addBatch();
                    if (i % 5000 == 4999) {
                        p.executeBatch();
                        c.commit();
                    }
                }
                p.executeBatch();
                c.commit();
            }
            try (Statement s = c.createStatement()) {
                s.execute("CREATE INDEX orders_customer ON orders(customer_id)");
                s.execute("CREATE INDEX orders_product ON orders(product_id)");
                s.execute("CREATE INDEX customer_city ON customer(city)");
            }
            c.commit();
            // Indexed point and range queries.
            phase("load", start);
            try (PreparedStatement p = c.prepareStatement(
                    "SELECT COUNT(*), SUM(o.qty) FROM orders o WHERE o.customer_id = ?")) {
                for (int i = 0; i < 20_000; i++) {
                    p.setInt(1, rnd.nextInt(customers));
                    try (ResultSet r = p.executeQuery()) {
                        r.next();
                        checksum += r.getLong(1) + r.getLong(2);
                    }
                }
            }
            phase("point queries", start);
            // Joins with grouping.
            try (PreparedStatement p = c.prepareStatement(
                    "SELECT c.city, pr.category, SUM(o.qty * pr.price) FROM orders o "
                            + "JOIN customer c ON c.id = o.customer_id JOIN product pr ON pr.id = o.product_id "
                            + "WHERE c.city = ? GROUP BY c.city, pr.category ORDER BY 3 DESC")) {
                for (int i = 0; i < 200; i++) {
                    p.setString(1, "city-" + rnd.nextInt(500));
                    try (ResultSet r = p.executeQuery()) {
                        while (r.next()) checksum += r.getBigDecimal(3).longValue();
                    }
                }
            }
            phase("joins", start);
            // Updates through an index, in batches.
            try (PreparedStatement p = c.prepareStatement(
                    "UPDATE customer SET balance = balance + (SELECT COALESCE(SUM(qty), 0) FROM orders WHERE customer_id = ?) WHERE id = ?")) {
                for (int i = 0; i < customers; i += 3) {
                    p.setInt(1, i);
                    p.setInt(2, i);
                    p.addBatch();
                    if (i % 3000 == 0) p.executeBatch();
                }
                p.executeBatch();
                c.commit();
            }
            phase("updates", start);
            try (Statement s = c.createStatement()) {
                s.executeUpdate("UPDATE orders SET qty = qty + 1 WHERE product_id < 200");
                c.commit();
                try (ResultSet r = s.executeQuery(
                        "SELECT pr.category, COUNT(*), AVG(o.qty) FROM orders o JOIN product pr ON pr.id = o.product_id GROUP BY pr.category")) {
                    while (r.next()) checksum += r.getLong(2);
                }
                s.executeUpdate("DELETE FROM orders WHERE MOD(id, 10) = 3");
                c.commit();
                try (ResultSet r = s.executeQuery("SELECT COUNT(*), SUM(qty) FROM orders")) {
                    r.next();
                    checksum += r.getLong(1) + r.getLong(2);
                }
            }
        }
        phase("updates+deletes", start);
        System.out.println("h2 checksum " + checksum);
    }
}

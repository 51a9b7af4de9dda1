import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.Statement;

/**
 * A heap to dump: H2 (libh2-java) holding ROWS rows in an in-memory table with a secondary
 * index, the way an application's cache or in-memory database fills a real heap. Prints
 * `ready` when the table is built and waits until stdin closes (bench/heap dumps it then).
 */
public class H2Heap {
    public static void main(String[] args) throws Exception {
        long rows = Long.parseLong(args[0]);
        Connection c = DriverManager.getConnection("jdbc:h2:mem:heap;DB_CLOSE_DELAY=-1");
        try (Statement s = c.createStatement()) {
            s.execute("CREATE TABLE T(ID BIGINT PRIMARY KEY, NAME VARCHAR(40), CITY VARCHAR(20), "
                    + "AMOUNT DECIMAL(12,2), PAYLOAD VARCHAR(200))");
            s.execute("CREATE INDEX T_NAME ON T(NAME)");
        }
        String[] cities = {"Lisbon", "Oslo", "Quito", "Hanoi", "Lagos", "Perth", "Lima", "Riga"};
        try (PreparedStatement p = c.prepareStatement("INSERT INTO T VALUES (?, ?, ?, ?, ?)")) {
            StringBuilder payload = new StringBuilder();
            for (long i = 0; i < rows; i++) {
                payload.setLength(0);
                for (int k = 0; k < 6; k++) payload.append(Long.toHexString(i * 2654435761L + k));
                p.setLong(1, i);
                p.setString(2, "customer-" + (i * 7919 % rows));
                p.setString(3, cities[(int) (i % cities.length)]);
                p.setBigDecimal(4, java.math.BigDecimal.valueOf(i % 100000, 2));
                p.setString(5, payload.toString());
                p.addBatch();
                if (i % 1000 == 999) p.executeBatch();
            }
            p.executeBatch();
        }
        System.out.println("ready");
        System.out.flush();
        while (System.in.read() >= 0) {
            // Keeps the database alive until the bench is done with it.
        }
        c.close();
    }
}

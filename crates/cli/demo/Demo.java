import java.util.*;
import java.util.concurrent.*;

/**
 * The bundled demo workload for `jvmprof demo`: three kinds of work on a small thread pool for a
 * few seconds, so the flame graph shows distinct, recognizable towers.
 *   - Demo.primes: trial-division prime counting (pure arithmetic)
 *   - Demo.sortRecords: building and sorting records with a comparator (collections, lambdas)
 *   - Demo.wordFrequencies: text splitting and HashMap counting (strings, hashing)
 * Usage: java Demo SECONDS
 */
public class Demo {
    static volatile long sink;

    static boolean isPrime(int n) {
        if (n < 2) return false;
        for (int d = 2; (long) d * d <= n; d++) if (n % d == 0) return false;
        return true;
    }

    static long primes(int limit) {
        long count = 0;
        for (int i = 0; i < limit; i++) if (isPrime(i)) count++;
        return count;
    }

    record Person(String name, int age, double score) {}

    static long sortRecords(Random random) {
        List<Person> people = new ArrayList<>();
        for (int i = 0; i < 20_000; i++) {
            people.add(new Person("p" + random.nextInt(100_000), random.nextInt(90), random.nextDouble()));
        }
        people.sort(Comparator.comparingInt(Person::age).thenComparing(Person::name));
        return people.get(people.size() / 2).age();
    }

    static final String TEXT = "the quick brown fox jumps over the lazy dog while the profiler "
            + "samples every thread of the virtual machine and counts what it sees ";

    static long wordFrequencies(int repeat) {
        StringBuilder sb = new StringBuilder();
        for (int i = 0; i < repeat; i++) sb.append(TEXT).append(i % 97).append(' ');
        Map<String, Integer> counts = new HashMap<>();
        for (String w : sb.toString().split(" ")) counts.merge(w, 1, Integer::sum);
        return counts.size();
    }

    public static void main(String[] args) throws Exception {
        long seconds = args.length > 0 ? Long.parseLong(args[0]) : 5;
        long end = System.nanoTime() + seconds * 1_000_000_000L;
        ExecutorService pool = Executors.newFixedThreadPool(3);
        List<Future<?>> tasks = new ArrayList<>();
        tasks.add(pool.submit(() -> { while (System.nanoTime() < end) sink += primes(200_000); }));
        tasks.add(pool.submit(() -> {
            Random r = new Random(42);
            while (System.nanoTime() < end) sink += sortRecords(r);
        }));
        tasks.add(pool.submit(() -> { while (System.nanoTime() < end) sink += wordFrequencies(2_000); }));
        for (Future<?> f : tasks) f.get();
        pool.shutdown();
        System.out.println("demo finished: " + sink);
    }
}

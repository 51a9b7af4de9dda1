/**
 * Many distinct stacks on purpose (bench/top): each call walks DEPTH levels, at each level
 * into l0 or l1 by one bit of a counter, so the calls cycle through 2^DEPTH distinct paths (and
 * the leaf spins a little). Runs THREADS threads for SECONDS seconds.
 * Usage: java StackMaze SECONDS [DEPTH=17] [THREADS=2]
 */
public class StackMaze {
    static volatile long sink;

    static long l0(long path, int level, long x) {
        return level == 0 ? spin(x) : step(path, level - 1, x + 1);
    }

    static long l1(long path, int level, long x) {
        return level == 0 ? spin(x) : step(path, level - 1, x + 3);
    }

    static long step(long path, int level, long x) {
        return ((path >>> level) & 1) == 0 ? l0(path, level, x) : l1(path, level, x);
    }

    static long spin(long x) {
        for (int i = 0; i < 2_000; i++) {
            x ^= x << 13; x ^= x >>> 7; x ^= x << 17;
        }
        return x;
    }

    public static void main(String[] args) throws Exception {
        long seconds = Long.parseLong(args[0]);
        int depth = args.length > 1 ? Integer.parseInt(args[1]) : 17;
        int threads = args.length > 2 ? Integer.parseInt(args[2]) : 2;
        long end = System.nanoTime() + seconds * 1_000_000_000L;
        Thread[] ts = new Thread[threads];
        for (int t = 0; t < threads; t++) {
            final long seed = t * 7919L;
            ts[t] = new Thread(() -> {
                long path = seed, x = 1;
                while (System.nanoTime() < end) {
                    x = step(path++, depth, x);
                }
                sink = x;
            }, "maze-" + t);
            ts[t].start();
        }
        System.out.println("ready");
        System.out.flush();
        for (Thread t : ts) t.join();
    }
}

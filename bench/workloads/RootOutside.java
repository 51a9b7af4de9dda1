import java.util.Arrays;

/**
 * bench/root-outside's program: the main thread runs a CPU workload of its own (sorting and
 * hashing) and prints its throughput every second ("tput MILLIS OPS"); a second thread serves a
 * request every 20 ms through Side.handle, whose call subgraph a root session instruments. The
 * main loop's code is outside that subgraph: its throughput shows what a root session costs the
 * rest of the application.
 */
public class RootOutside {
    static volatile long sink;

    static final class Side {
        static long handle(int i) {
            long h = parse(i) + validate(i);
            for (int k = 0; k < 50; k++) h += step(h, k);
            return h;
        }

        static long parse(int i) { return Integer.toString(i * 7919).hashCode(); }

        static long validate(int i) { return (i & 1) == 0 ? 1 : 2; }

        static long step(long h, int k) { return (h * 31 + k) ^ (h >>> 7); }
    }

    static long work(int[] data, int round) {
        for (int i = 0; i < data.length; i++) data[i] = (i * 2654435761L + round) > 0 ? i ^ round : i;
        Arrays.sort(data);
        long h = 0;
        for (int v : data) h = h * 31 + v;
        return h;
    }

    public static void main(String[] args) throws Exception {
        Thread side = new Thread(() -> {
            int i = 0;
            while (true) {
                sink += Side.handle(i++);
                try { Thread.sleep(20); } catch (InterruptedException e) { return; }
            }
        }, "requests");
        side.setDaemon(true);
        side.start();
        int[] data = new int[4096];
        long ops = 0, last = System.currentTimeMillis();
        System.out.println("ready");
        for (int round = 0; ; round++) {
            sink += work(data, round);
            ops++;
            long now = System.currentTimeMillis();
            if (now - last >= 1000) {
                System.out.println("tput " + now + " " + ops);
                ops = 0;
                last = now;
            }
        }
    }
}

import java.io.*;
import java.net.*;
import java.nio.file.*;
import java.util.*;
import java.util.stream.*;

/**
 * Verifier harness: defines every class under ROOT in a child-first loader and forces linking
 * (getDeclaredFields links the class, so HotSpot's verifier runs), then counts VerifyError,
 * ClassFormatError and other failures.
 *
 * Usage: java VerifyLoad [--exclude FILE] [--fails FILE] [--deps CLASSPATH] ROOT...
 * (each ROOT gets its own loader; FILE lines are `rootname<TAB>class`)
 */
public class VerifyLoad {
    static final class Loader extends ClassLoader {
        final Path root;
        Loader(Path root, ClassLoader parent) { super(parent); this.root = root; }
        @Override
        protected Class<?> loadClass(String name, boolean resolve) throws ClassNotFoundException {
            synchronized (getClassLoadingLock(name)) {
                Class<?> c = findLoadedClass(name);
                if (c == null) {
                    Path p = root.resolve(name.replace('.', '/') + ".class");
                    if (!name.startsWith("java.") && Files.isRegularFile(p)) {
                        byte[] b;
                        try { b = Files.readAllBytes(p); } catch (IOException e) { throw new ClassNotFoundException(name, e); }
                        c = defineClass(name, b, 0, b.length);
                    } else {
                        c = getParent().loadClass(name);
                    }
                }
                if (resolve) resolveClass(c);
                return c;
            }
        }
    }

    public static void main(String[] args) throws Exception {
        Set<String> exclude = new HashSet<>();
        PrintWriter fails = null;
        List<URL> deps = new ArrayList<>();
        List<Path> roots = new ArrayList<>();
        for (int i = 0; i < args.length; i++) {
            if (args[i].equals("--exclude")) exclude.addAll(Files.readAllLines(Paths.get(args[++i])));
            else if (args[i].equals("--fails")) fails = new PrintWriter(new FileWriter(args[++i]));
            else if (args[i].equals("--deps")) {
                for (String d : args[++i].split(File.pathSeparator))
                    if (!d.isEmpty()) deps.add(Paths.get(d).toUri().toURL());
            } else roots.add(Paths.get(args[i]));
        }
        ClassLoader parent = new URLClassLoader(deps.toArray(new URL[0]), ClassLoader.getPlatformClassLoader());
        int total = 0, ok = 0, verify = 0, format = 0, other = 0, excluded = 0;
        for (Path root : roots) {
            List<String> names;
            try (Stream<Path> s = Files.walk(root)) {
                names = s.filter(p -> p.toString().endsWith(".class"))
                    .map(p -> root.relativize(p).toString())
                    .map(n -> n.substring(0, n.length() - 6).replace(File.separatorChar, '.'))
                    .filter(n -> !n.endsWith("module-info") && !n.startsWith("java.") && !n.startsWith("META-INF"))
                    .sorted().collect(Collectors.toList());
            }
            Loader loader = new Loader(root, parent);
            String unit = root.getFileName().toString();
            for (String n : names) {
                total++;
                String key = unit + "\t" + n;
                if (exclude.contains(key)) { excluded++; continue; }
                String kind = null;
                Throwable err = null;
                try {
                    Class<?> c = Class.forName(n, false, loader);
                    c.getDeclaredFields();
                    ok++;
                } catch (VerifyError e) {
                    verify++; kind = "VerifyError"; err = e;
                } catch (ClassFormatError e) {
                    format++; kind = "ClassFormatError"; err = e;
                } catch (Throwable e) {
                    other++; kind = "Other"; err = e;
                }
                if (err != null) {
                    if (fails != null) fails.println(key);
                    if (!kind.equals("Other") || System.getenv("VERBOSE_OTHER") != null)
                        System.out.println("FAIL\t" + kind + "\t" + key + "\t" + err);
                }
            }
        }
        if (fails != null) fails.close();
        System.out.println("RESULT classes " + total + " linked " + ok + " verify_errors " + verify
            + " format_errors " + format + " other_errors " + other + " excluded " + excluded);
    }
}

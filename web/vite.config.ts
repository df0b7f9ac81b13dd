import { resolve } from 'node:path';
import { defineConfig } from 'vite';

// Two pages, built into dist/ and embedded in the erp binary (web/web.go):
// index.html is the event-stream page (/events), playground.html GraphiQL
// (/playground). Hashed assets go to dist/assets/.
export default defineConfig({
  build: {
    outDir: 'dist',
    emptyOutDir: true,
    target: 'es2022',
    chunkSizeWarningLimit: 4096,
    rollupOptions: {
      input: {
        events: resolve(import.meta.dirname, 'index.html'),
        playground: resolve(import.meta.dirname, 'playground.html'),
      },
      // GraphiQL's React dependencies start with "use client", which only
      // means something to server-component bundlers.
      onwarn(warning, warn) {
        if (warning.code !== 'MODULE_LEVEL_DIRECTIVE') warn(warning);
      },
    },
  },
  server: {
    // npm run dev: the page on :5173 against a server started by make run.
    proxy: { '/graphql': { target: 'http://localhost:8080', ws: true }, '/config.json': 'http://localhost:8080' },
  },
});

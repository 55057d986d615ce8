{-# LANGUAGE DataKinds, KindSignatures, NoImplicitPrelude, ScopedTypeVariables,
             TypeApplications, TypeOperators, FlexibleContexts, NoStarIsType, TypeFamilies,
             AllowAmbiguousTypes #-}
{-# OPTIONS_GHC -fplugin GHC.TypeLits.Normalise -fplugin GHC.TypeLits.KnownNat.Solver -fplugin GHC.TypeLits.Extra.Solver #-}
{-|
A Keras @LayerNormalization@ of the last axis: each beat of @c@ values is
normalized by its own mean and variance,
@y = activation (requantize ((x - mean) / sqrt (var + eps) * gamma + beta))@.

= Arithmetic (docs/guide/contract.md, "Layer normalization")

With the raw inputs @x_i@ (@f@ fraction bits):

1. @S = sum x_i@, @d_i = c x_i - S@ in @Signed bd@ (exact: @c (x_i - mean) 2^f@);
2. @u = sum d_i^2 + e@ in @Unsigned (2 hm)@, exact; @e = round (c^3 2^(2f) eps)@;
3. @k@ the leading zero bit pairs of @u@, so @u 4^k@ has its top pair non-zero:
   @u = m 4^h@ with @h = hm - k@ and the mantissa @m@ in @[1/4, 1)@; the table
   index @j@ is the top @n@ bits of @u 4^k@ less @2^(n-2)@ (0 when @u = 0@);
4. the table entry @T[j]@ (@SFixed ti r@) is @sqrt (c / m)@, so
   @sqrt (c / u) = T[j] 2^-h@ up to the table's error (its bound is written
   next to the layer in Network.hs);
5. @gamma_i d_i@ (exact) shifted left by @k@ is @gamma_i d_i 2^(hm - h)@, an
   @SFixed (iw + 1) (fw + hm)@ (@|d_i| < 2^h@ since @d_i^2 <= u < 4^h@);
   its exact product with @T[j]@ plus @beta_i@ is the value, exactly
   @gamma_i z_i + beta_i@ with the table's @r@, which the caller's @finish@
   rounds once (round half up, saturate) and activates.

Every step before the table is exact, and so are the products after it:
the golden model (keras2clash.kinds.layernorm) computes the same integers.

= Hardware, timing, protocol

A beat a cycle in 'LayerNormDepth' register stages on "K2C.Pipe": the input
beat (the producer's queue is LUT RAM, read combinationally), the sum @S@ (an
adder tree), the deviations (@c x_i@ as shifts and adds of the constant's
bits, then a subtraction: no multiplier), the squares and @gamma_i d_i@ (two
multipliers per channel, side by side), @u@ (an adder tree), the leading
pairs (a priority encoder), the table index (a barrel shift), the table read
(a block RAM with its synchronous read, beside the shift of @gamma_i d_i@),
its output register, the products, then the sum with beta, the rounding and
the activation. Its timing is "K2C.Pipe"'s with @d = 11@.

= Storage

The table is a memory file (@weights/<layer>_rsqrt.mem@, one entry per line
in ASCII binary), read as "K2C.Lut"'s 'TableRom' (an asynchronous ROM): the
register after the read becomes the block RAM's synchronous read, the next
its output register. A 'Vec' of the entries in @Weights.hs@ would do the
same in simulation, but Clash takes minutes to evaluate one of 768 entries.
-}
module K2C.LayerNorm
  ( layerNorm
  , LayerNormDepth
  , timesConst
  , leadingPairs
  , tableIndex
  ) where

import Clash.Prelude
import Data.Maybe (fromMaybe)

import K2C.Lut (TableRom (..))
import K2C.Merge (addExact, mulExact)
import K2C.Pipe (pipeS, stageReg)
import K2C.Stream (Stream)

-- | Register stages of 'layerNorm' (see the module header).
type LayerNormDepth = 11

-- | The stage: @bd@ the width of @S@ and @d_i@, @n@ the table's index bits
-- (type applications); @e@, the table, gamma and beta from @Weights.hs@;
-- @finish@ the requantization and the activation.
layerNorm
  :: forall bd n dom c hm m ti r ia fa iw fw ib fb b
   . ( HiddenClockResetEnable dom, KnownNat c, KnownNat bd, KnownNat n, 2 <= n, n <= 2 * hm
     , KnownNat hm, 1 <= hm, KnownNat m, 1 <= m, KnownNat ti, KnownNat r
     , KnownNat ia, KnownNat fa, KnownNat iw, KnownNat fw, KnownNat ib, KnownNat fb, NFDataX b )
  => Unsigned (2 * hm) -> TableRom m (SFixed ti r)
  -> Vec c (SFixed iw fw) -> Vec c (SFixed ib fb)
  -> (SFixed (1 + Max (iw + 1 + ti) ib) (Max (fw + hm + r) fb) -> b)
  -> Stream dom (Vec c (SFixed ia fa)) (Vec c b)
layerNorm e table gammas betas finish = pipeS (SNat @LayerNormDepth) stages
  where
    stages input = done
      where
        beat   = stageReg input
        sums   = stageReg (fmap (\xs -> let ws = map widen xs in (ws, fold (+) (0 :> ws))) <$> beat)
        devs   = stageReg (fmap (\(ws, s) -> map (\w -> timesConst @c w - s) ws) <$> sums)
        squares = stageReg (fmap (\ds -> (map square ds, zipWith scaled gammas ds)) <$> devs)
        us     = stageReg (fmap (\(qs, gs) -> (fold (+) (e :> qs), gs)) <$> squares)
        pairs  = stageReg (fmap (\(u, gs) -> (u, leadingPairs u, gs)) <$> us)
        index  = stageReg (fmap (\(u, k, gs) -> (tableIndex @n u k, k, gs)) <$> pairs)
        -- the table's read and its register, which synthesis absorbs into the block RAM
        entry  = stageReg (fmap (\(j, _, _) -> readTable j) <$> index)
        normed = stageReg (fmap (\(_, k, gs) -> map (normalize k) gs) <$> index)
        -- the block RAM's output register (nothing but this register reads its data)
        fetched = stageReg ((\g t -> (,) <$> g <*> t) <$> normed <*> entry)
        prods  = stageReg (fmap (\(gs, t) -> map (`mulExact` t) gs) <$> fetched)
        done   = stageReg (fmap (map finish . zipWith (flip addExact) betas) <$> prods)

    TableRom readTable = table

    widen :: SFixed ia fa -> Signed bd
    widen = resize . unSF

    square :: Signed bd -> Unsigned (2 * hm)
    square d = unpack (resize (pack (d `mul` d)))

    scaled :: SFixed iw fw -> Signed bd -> SFixed (iw + bd) fw
    scaled g d = mulExact g (sf (SNat @0) d)

    normalize :: Index hm -> SFixed (iw + bd) fw -> SFixed (iw + 1) (fw + hm)
    normalize k gd = sf (SNat @(fw + hm)) (shiftL (resize (unSF gd)) (fromEnum k))

-- | @c x@ for the constant @c@: the sum of @x@ shifted by each set bit of @c@
-- (synthesis folds the zero terms away), so that no multiplier is spent on it.
timesConst :: forall c w . (KnownNat c, KnownNat w) => Signed w -> Signed w
timesConst x = fold (+) (0 :> imap term (reverse (bv2v (pack constant))))
  where
    constant = natToNum @c :: Signed w
    term i b = if b == high then shiftL x (fromEnum i) else 0

-- | The leading zero bit pairs of @u@ (@hm - 1@ for @u = 0@, whose every
-- later use multiplies by a zero @d_i@).
leadingPairs :: forall hm . KnownNat hm => Unsigned (2 * hm) -> Index hm
leadingPairs u = fromMaybe maxBound (findIndex (/= 0) groups)
  where
    groups = unpack (pack u) :: Vec hm (BitVector 2)

-- | The table index of @u@ with @k@ leading pairs: the top @n@ bits of
-- @u 4^k@ (at least @2^(n-2)@ when @u /= 0@) less @2^(n-2)@; 0 for @u = 0@.
-- The table has @m = 3 * 2^(n-2)@ entries.
tableIndex
  :: forall n hm m . (KnownNat n, KnownNat hm, n <= 2 * hm, KnownNat m) => Unsigned (2 * hm) -> Index hm -> Index m
tableIndex u k = if top < quarter then 0 else fromIntegral (top - quarter)
  where
    top = resize (shiftR (shiftL u (2 * fromEnum k)) (natToNum @(2 * hm - n))) :: Unsigned n
    quarter = bit (natToNum @n - 2)
